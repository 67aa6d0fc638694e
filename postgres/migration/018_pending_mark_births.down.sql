-- Back to step 017. Without the births they carry, pending marks are judged by time alone: a mark a count settled
-- by its births is owed again and its group scanned once more; none is lost.
CREATE OR REPLACE VIEW v_pending_mark_owed AS
SELECT DISTINCT c.group_key, c.ruleset_version
FROM governance_pending_mark p
CROSS JOIN LATERAL unnest(p.group_keys, p.marked_at) AS u(group_key, marked_at)
JOIN governance_candidate_state c ON c.group_key = u.group_key AND c.ruleset_version = p.ruleset_version
WHERE NOT c.dirty AND coalesce(c.counted_at, c.scan_time) < u.marked_at;
DROP FUNCTION gcos_mark_counted(timestamptz, timestamptz, bigint[], timestamptz, text, boolean);
DROP FUNCTION gcos_objects_queued(text);
ALTER TABLE governance_pending_mark DROP COLUMN births;
ALTER TABLE governance_candidate_state DROP COLUMN counted_births;
