-- Pending membership marks (SPEC §8). A membership mark (a birth joined a group, a member retired) that finds its
-- group's candidate row already dirty is not written onto the row: a scan may hold that row and be counting from
-- before the change, and waiting for it would hold the intake's handoff behind every scan and the scans behind the
-- handoff. The mark is kept here, committed with the handoff, and each scan tick settles it: dropped once the row
-- has been scanned by a transaction that read its counts after the mark (they include the change), written onto the
-- row when a scan that counted before it cleared the row.

-- counted_at: when the scan that wrote the row read its member counts (the start of the count's first statement: a
-- birth committed before it is counted). NULL for rows written without a count read (a seed, an audit): their
-- scan_time, the start of the writing transaction, stands in.
ALTER TABLE governance_candidate_state ADD COLUMN counted_at timestamptz;

CREATE TABLE governance_pending_mark (
    id              bigint        GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    ruleset_version text          NOT NULL,
    group_keys      text[]        NOT NULL,
    reasons         text[]        NOT NULL, -- each key's reason, in group_keys' order
    marked_at       timestamptz[] NOT NULL, -- when each key was marked (after its change was read)
    CHECK (cardinality(group_keys) > 0 AND cardinality(group_keys) = cardinality(reasons)
           AND cardinality(group_keys) = cardinality(marked_at))
);

-- A pending mark is a handoff's signal: truncating the table would lose it.
CREATE TRIGGER governance_pending_mark_no_truncate BEFORE TRUNCATE ON governance_pending_mark
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();

-- The groups a pending mark is still owed to: their row is clean under a scan that read its counts before the mark,
-- so its count may predate the change. Until a tick settles the mark they are in flight, as a dirty group is.
CREATE VIEW v_pending_mark_owed AS
SELECT DISTINCT c.group_key, c.ruleset_version
FROM governance_pending_mark p
CROSS JOIN LATERAL unnest(p.group_keys, p.marked_at) AS u(group_key, marked_at)
JOIN governance_candidate_state c ON c.group_key = u.group_key AND c.ruleset_version = p.ruleset_version
WHERE NOT c.dirty AND coalesce(c.counted_at, c.scan_time) < u.marked_at;
