-- Back to step 016. The marks still owed (their row clean under a scan that counted before them) are written onto
-- their rows first, so no signal is lost.
UPDATE governance_candidate_state c
SET dirty = true, dirty_reason = p.reason, dirtied_at = p.marked_at,
    recompute_status = CASE WHEN c.recompute_status = 'ok' THEN 'dirty' ELSE c.recompute_status END, updated_at = now()
FROM (SELECT DISTINCT ON (m.ruleset_version, u.key) m.ruleset_version, u.key, u.reason, u.marked_at
      FROM governance_pending_mark m, unnest(m.group_keys, m.reasons, m.marked_at) AS u(key, reason, marked_at)
      ORDER BY m.ruleset_version, u.key, u.marked_at DESC) p
WHERE c.group_key = p.key AND c.ruleset_version = p.ruleset_version AND NOT c.dirty AND coalesce(c.counted_at, c.scan_time) < p.marked_at;
DROP VIEW v_pending_mark_owed;
DROP TABLE governance_pending_mark;
ALTER TABLE governance_candidate_state DROP COLUMN counted_at;
