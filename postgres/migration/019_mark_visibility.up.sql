-- A pending mark is settled by a count that could see the marking transaction (SPEC §8). Judged by time alone, a
-- mark stamped before a count began was taken as counted even when its transaction committed after the count's
-- first read: the count then read kept member counts that did not know the change yet (a birth retired or
-- superseded stays counted in the base it left), and the mark that would have re-scanned the group was dropped.
-- So a count records the snapshot it read under, and a mark the transaction that made it.

-- counted_snapshot: the snapshot of the count's first statement; a transaction visible in it committed before the
-- count read anything. NULL: not known (no count read, or written before this step): counted_at decides.
ALTER TABLE governance_candidate_state ADD COLUMN counted_snapshot pg_snapshot;

-- marked_by: the transaction that made the mark (a tick that keeps marks pending makes them again, after the
-- transactions that made them committed). Marks made before this step carry the migration's transaction.
ALTER TABLE governance_pending_mark ADD COLUMN marked_by xid8 NOT NULL DEFAULT pg_current_xact_id();

-- Whether a row written under a count includes a membership mark: the count's snapshot saw every transaction behind
-- the mark (marked_by), or, for a row written without a snapshot, the count began after the mark was stamped; or the
-- count read every birth behind the mark and no object of the group's base is still queued for its object row.
CREATE FUNCTION gcos_mark_counted(counted_at timestamptz, scan_time timestamptz, counted_births bigint[],
                                  marked_at timestamptz, births text, objects_queued boolean,
                                  counted_snapshot pg_snapshot, marked_by xid8[]) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN CASE WHEN counted_snapshot IS NOT NULL AND marked_by IS NOT NULL
            THEN NOT EXISTS (SELECT 1 FROM unnest(marked_by) AS x(xid) WHERE NOT pg_visible_in_snapshot(x.xid, counted_snapshot))
            ELSE coalesce(counted_at, scan_time) >= marked_at END
    OR (NOT objects_queued AND coalesce(births::bigint[] <@ counted_births, false));

CREATE OR REPLACE VIEW v_pending_mark_owed AS
SELECT DISTINCT c.group_key, c.ruleset_version
FROM governance_pending_mark p
CROSS JOIN LATERAL unnest(p.group_keys, p.marked_at, p.births) AS u(group_key, marked_at, births)
JOIN governance_candidate_state c ON c.group_key = u.group_key AND c.ruleset_version = p.ruleset_version
WHERE NOT c.dirty
  AND NOT gcos_mark_counted(c.counted_at, c.scan_time, c.counted_births, u.marked_at, u.births, gcos_objects_queued(c.group_key),
                            c.counted_snapshot, ARRAY[p.marked_by]);
