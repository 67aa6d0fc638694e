-- The idempotency key of every governance signal GCOS emits or captures: (source_system, event_type,
-- correlation_id). event_outbox and event_pending are substrate tables GCOS may not index, so the key lives here,
-- where a replayed signal is refused by the primary key in O(log n) instead of a scan of the outbox.
CREATE TABLE governance_signal_key (
    source_system  text        NOT NULL,
    event_type     text        NOT NULL,
    correlation_id text        NOT NULL,
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_system, event_type, correlation_id)
);
