-- The announcements' idempotency keys (governance_signal_key, migration 005), partitioned by the hour a key was
-- first seen, like GCOS's logs (migration 023): a key is kept for a dedup window (events.signal_key_keep), and
-- retention drops whole partitions past it instead of deleting rows (postgres.MaintainSignalKeysTx).
--
-- A partitioned table's unique key must hold its partition key, so the key is unique per hour: a claim first looks
-- the key up in every partition (the primary key's leading columns, one index probe each) and inserts only a key
-- none holds. Two transactions claiming one key in the same hour still serialise on the primary key, as before;
-- first_seen_at is the hour, not the instant, for that. Partitions are whole hours (the width is configuration,
-- a multiple of an hour), so a key always falls in one. A row no partition takes yet lands in the default
-- partition and is moved into its own at the next maintenance.
ALTER TABLE governance_signal_key RENAME TO governance_signal_key_unpartitioned;
ALTER INDEX governance_signal_key_pkey RENAME TO governance_signal_key_unpartitioned_pkey;
CREATE TABLE governance_signal_key (
    source_system  text        NOT NULL,
    event_type     text        NOT NULL,
    correlation_id text        NOT NULL,
    first_seen_at  timestamptz NOT NULL DEFAULT date_bin('1 hour', now(), '0001-01-01 00:00:00+00'),
    PRIMARY KEY (source_system, event_type, correlation_id, first_seen_at)
) PARTITION BY RANGE (first_seen_at);
CREATE TABLE governance_signal_key_default PARTITION OF governance_signal_key DEFAULT;
INSERT INTO governance_signal_key (source_system, event_type, correlation_id, first_seen_at)
    SELECT source_system, event_type, correlation_id, date_bin('1 hour', first_seen_at, '0001-01-01 00:00:00+00')
    FROM governance_signal_key_unpartitioned;
DROP TABLE governance_signal_key_unpartitioned;
