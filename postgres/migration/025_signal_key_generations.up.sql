-- The announcements' idempotency keys (governance_signal_key, migration 005) kept for a dedup window
-- (events.signal_key_keep) instead of forever: the key table is partitioned into two generations, the current one,
-- which new keys go into, and the one before it. When the current generation has been current for the window, the
-- older one is truncated (every key in it was first seen longer than the window ago) and becomes the current one
-- (postgres.RotateSignalKeysTx): a key is kept between one and two windows, and retention leaves nothing to vacuum.
--
-- A partitioned table's unique key must hold its partition key, so the key is unique per generation; a claim looks a
-- key up in both generations (two index probes; a partition by time would take one probe per partition). Two claims of
-- one key in a generation serialise on the primary key, as before, and a rotation waits for every transaction that
-- claimed keys (it locks the table), so no claim spans it.
ALTER TABLE governance_signal_key RENAME TO governance_signal_key_unpartitioned;
ALTER INDEX governance_signal_key_pkey RENAME TO governance_signal_key_unpartitioned_pkey;
CREATE TABLE governance_signal_key (
    source_system  text        NOT NULL,
    event_type     text        NOT NULL,
    correlation_id text        NOT NULL,
    generation     smallint    NOT NULL CHECK (generation BETWEEN 0 AND 1),
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_system, event_type, correlation_id, generation)
) PARTITION BY LIST (generation);
CREATE TABLE governance_signal_key_g0 PARTITION OF governance_signal_key FOR VALUES IN (0);
CREATE TABLE governance_signal_key_g1 PARTITION OF governance_signal_key FOR VALUES IN (1);

-- The current generation, and since when it is current. One row.
CREATE TABLE gcos_signal_key_generation (
    one     boolean     PRIMARY KEY DEFAULT true CHECK (one),
    current smallint    NOT NULL CHECK (current BETWEEN 0 AND 1),
    since   timestamptz NOT NULL
);
-- The keys kept so far are the current generation, current since the oldest of them was first seen: the first
-- rotation comes a window after it, and truncates only the empty generation.
INSERT INTO gcos_signal_key_generation (current, since)
    SELECT 0, coalesce(min(first_seen_at), now()) FROM governance_signal_key_unpartitioned;
INSERT INTO governance_signal_key (source_system, event_type, correlation_id, generation, first_seen_at)
    SELECT source_system, event_type, correlation_id, 0, first_seen_at FROM governance_signal_key_unpartitioned;
DROP TABLE governance_signal_key_unpartitioned;
