-- The emission discipline of GCOS's own announcements (doc 41 §41.8–§41.9). The promoter, the one writer (it holds
-- the promotion lock), keeps here what it needs to decide: when a type last announced a subject (cooldown), each
-- type's current window (ceiling, digest of what it held back), and the announcements that escalate if their owner
-- has not read them in time. Substrate event tables stay untouched.
CREATE TABLE gcos_event_cooldown (
    event_type      text        NOT NULL,
    subject_ref     text        NOT NULL,
    last_emitted_at timestamptz NOT NULL,
    quiet_until     timestamptz NOT NULL, -- a newer announcement about the subject waits until then
    PRIMARY KEY (event_type, subject_ref)
);
CREATE INDEX gcos_event_cooldown_quiet ON gcos_event_cooldown (quiet_until);

CREATE TABLE gcos_event_window (
    event_type   text        PRIMARY KEY,
    window_start timestamptz NOT NULL,
    window_end   timestamptz NOT NULL,
    emitted      integer     NOT NULL DEFAULT 0 CHECK (emitted >= 0),
    held         integer     NOT NULL DEFAULT 0 CHECK (held >= 0)
);

CREATE TABLE gcos_event_escalation (
    event_id        uuid        PRIMARY KEY, -- the event_outbox row that may escalate
    event_type      text        NOT NULL,
    owner_ref       text        NOT NULL,    -- whose read settles it
    due_at          timestamptz NOT NULL,
    settled_at      timestamptz,
    outcome         text CHECK (outcome IN ('read', 'escalated')),
    escalation_ref  text                     -- the escalation's correlation id
);
CREATE INDEX gcos_event_escalation_due ON gcos_event_escalation (due_at) WHERE settled_at IS NULL;
