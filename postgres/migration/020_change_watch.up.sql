-- The verdict change log as a watch (SPEC §13: GET /v1/changes?after=<cursor>, GET /v1/changes/watch). A change is
-- stamped with its transaction's id, so a reader that keeps the pg_current_snapshot() of its previous read reads
-- exactly the changes of the transactions that committed since (xid >= the snapshot's xmin AND not visible in it):
-- in commit order between reads, complete however ids were assigned and commits happened, never twice. Changes
-- written before this step carry the migration's transaction.
ALTER TABLE gcos_verdict_change ADD COLUMN xid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX gcos_verdict_change_xid ON gcos_verdict_change (xid);

-- Changes of transactions below pruned_below may be gone (scan.verdict_changes_keep): a cursor whose snapshot's
-- xmin lies below it may have missed some, and is refused (410) instead of silently skipping them.
CREATE TABLE gcos_verdict_change_horizon (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    pruned_below xid8 NOT NULL
);
INSERT INTO gcos_verdict_change_horizon (pruned_below) VALUES ('0');

-- The registries the intake watches directly (intake.registries; SPEC §12: a consistency token covers their rows
-- too): each row's fingerprint as last handed off, and each registry's last poll — when it read, and the count and
-- XOR of the fingerprints it saw, which a question asked with a token compares the registry with now.
CREATE TABLE gcos_registry_row (
    registry    text   NOT NULL,
    key         text   NOT NULL,
    fingerprint bigint NOT NULL,
    PRIMARY KEY (registry, key)
);
CREATE TABLE gcos_registry_poll (
    registry        text        PRIMARY KEY,
    polled_at       timestamptz NOT NULL,
    row_count       bigint      NOT NULL,
    xor_fingerprint bigint      NOT NULL
);
