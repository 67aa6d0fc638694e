-- Content-addressed ruleset versions (SPEC §6, doc 38 §38.5) and the group_key registry (SPEC §4).

CREATE TABLE governance_ruleset (
    ruleset_version text PRIMARY KEY CHECK (ruleset_version ~ '^gov-rs-[0-9a-f]{12}$'),
    content_hash    text        NOT NULL CHECK (content_hash ~ '^[0-9a-f]{64}$'),
    components      jsonb       NOT NULL,  -- provenance summary: measurement ids, law codes, absent list
    document        jsonb       NOT NULL,  -- the canonical component rows that were hashed (diff reads these)
    status          text        NOT NULL DEFAULT 'draft' CHECK (status IN ('draft', 'active', 'superseded')),
    proposed_by     text        NOT NULL CHECK (proposed_by <> ''),
    proposed_at     timestamptz NOT NULL DEFAULT now(),
    activated_at    timestamptz,
    activated_by    text,
    approval_ref    text,
    supersedes      text REFERENCES governance_ruleset (ruleset_version),
    notes           text,
    -- An active or superseded row was approved by someone other than its proposer (no self-approval).
    CHECK (status = 'draft' OR (approval_ref IS NOT NULL AND approval_ref <> ''
                                AND activated_by IS NOT NULL AND activated_by <> proposed_by
                                AND activated_at IS NOT NULL))
);
-- At most one active ruleset at a time.
CREATE UNIQUE INDEX governance_ruleset_one_active ON governance_ruleset ((true)) WHERE status = 'active';

CREATE TABLE governance_group (
    group_key        text PRIMARY KEY CHECK (group_key ~ '^[0-9a-f]{32}$'),
    object_class     text,
    source_registry  text,
    axis_family      text,
    scope            text,
    lifecycle_status text,
    owner_scope      text,
    member_count     bigint      NOT NULL DEFAULT 0 CHECK (member_count >= 0),
    first_seen_at    timestamptz NOT NULL DEFAULT now(),
    last_seen_at     timestamptz NOT NULL DEFAULT now(),
    depends_on       jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX governance_group_source_registry_idx ON governance_group (source_registry);
CREATE INDEX governance_group_object_class_idx ON governance_group (object_class);
CREATE INDEX governance_group_scope_idx ON governance_group (scope);
