-- A group no scan has ever judged places its members as stale, whatever the last full snapshot knew of it. The
-- intake records a group when a birth first lands in its base and a scan judges it later; a full audit that
-- captures the source meanwhile names the group, yet leaves it to the scans (it seeds only groups the registry
-- does not hold, and none beside a live sibling of the same base). Placing such members nowhere opened the ledger
-- by their number until the scan committed, on a system that was right. A group the snapshot knew that was judged
-- under another ruleset and has no row under the current one (a row lost or moved, or an activation that did not
-- carry it) still places its members nowhere.
--
-- The coverage invariant per scope, in objects, against the estate now: total is every born object (each belongs
-- to one group per scope). Each live group's members, as its last scan counted them, land in the bucket of its
-- candidate row, except materialized objects, which land in their own. Objects no group has counted yet (born,
-- or moved, since their group's last scan) are counted as stale, and so are the members of a group no scan has
-- judged yet: unknown is never safe, and never silent. A group the snapshot knew with a candidate row under
-- another ruleset only, or a relevant group or object with no coverage outcome, places its objects nowhere, so the
-- ledger does not close; nor does it when an object is counted twice. snapshot_id is the full snapshot (backfill
-- or audit) the candidate rows are qualified by.
CREATE OR REPLACE VIEW v_invariant_ledger AS
WITH snap AS (
    SELECT id, metrics FROM evolution_snapshots
    WHERE scope IN ('governance.backfill', 'governance.audit') ORDER BY id DESC LIMIT 1
), estate AS (
    SELECT gcos_estate_count() AS births
), live AS (
    SELECT g.group_key FROM governance_group g WHERE g.retired_at IS NULL
), scopes AS (
    SELECT DISTINCT g.scope FROM governance_group g WHERE g.retired_at IS NULL
), objects AS (
    SELECT o.group_key, CASE WHEN o.effective_verdict = 'relevant' AND o.coverage_outcome IS NULL THEN NULL
                             ELSE gcos_invariant_bucket(o.effective_verdict, o.coverage_outcome) END AS bucket,
           count(*) AS n
    FROM v_candidate_object_effective o WHERE o.lifecycle_status = 'active'
    GROUP BY 1, 2
), groups AS (
    SELECT e.scope,
           CASE WHEN e.member_count IS NULL AND (SELECT metrics -> 'groups' FROM snap) ? e.group_key
                     AND EXISTS (SELECT 1 FROM governance_candidate_state c WHERE c.group_key = e.group_key) THEN NULL
                WHEN e.effective_verdict = 'relevant' AND e.coverage_outcome IS NULL THEN NULL
                ELSE gcos_invariant_bucket(e.effective_verdict, e.coverage_outcome) END AS bucket,
           coalesce(e.member_count, e.group_member_count) AS members,
           coalesce(e.member_count, e.group_member_count)
               - coalesce((SELECT sum(n) FROM objects o WHERE o.group_key = e.group_key), 0) AS n
    FROM v_candidate_effective e JOIN live l USING (group_key)
), placed AS (
    SELECT scope, bucket, n FROM groups
    UNION ALL
    SELECT g.scope, o.bucket, o.n FROM objects o JOIN governance_group g USING (group_key)
), unplaced AS (
    SELECT s.scope, greatest((SELECT births FROM estate) - coalesce((SELECT sum(members) FROM groups g WHERE g.scope = s.scope), 0), 0) AS n
    FROM scopes s
)
SELECT s.scope,
       (SELECT id FROM snap) AS snapshot_id,
       (SELECT births FROM estate) AS total,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'covered'), 0)::bigint AS covered,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'orphans'), 0)::bigint AS orphans,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'approved_exceptions'), 0)::bigint AS approved_exceptions,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'retired_or_ignored'), 0)::bigint AS retired_or_ignored,
       (coalesce(sum(p.n) FILTER (WHERE p.bucket = 'stale'), 0) + (SELECT n FROM unplaced u WHERE u.scope = s.scope))::bigint AS stale,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'deferred_birth'), 0)::bigint AS deferred_birth,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'class_0'), 0)::bigint AS class_0,
       (SELECT n FROM unplaced u WHERE u.scope = s.scope)::bigint AS unplaced
FROM scopes s
LEFT JOIN placed p ON p.scope = s.scope
GROUP BY s.scope;
