-- Back to step 018: pending marks are judged by time again (a mark whose transaction committed after a count began
-- may be taken as counted); none is lost by going back.
CREATE OR REPLACE VIEW v_pending_mark_owed AS
SELECT DISTINCT c.group_key, c.ruleset_version
FROM governance_pending_mark p
CROSS JOIN LATERAL unnest(p.group_keys, p.marked_at, p.births) AS u(group_key, marked_at, births)
JOIN governance_candidate_state c ON c.group_key = u.group_key AND c.ruleset_version = p.ruleset_version
WHERE NOT c.dirty
  AND NOT gcos_mark_counted(c.counted_at, c.scan_time, c.counted_births, u.marked_at, u.births, gcos_objects_queued(c.group_key));
DROP FUNCTION gcos_mark_counted(timestamptz, timestamptz, bigint[], timestamptz, text, boolean, pg_snapshot, xid8[]);
ALTER TABLE governance_pending_mark DROP COLUMN marked_by;
ALTER TABLE governance_candidate_state DROP COLUMN counted_snapshot;
