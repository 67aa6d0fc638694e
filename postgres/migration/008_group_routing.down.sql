-- Back to step 007: the ledger against the last full snapshot, groups never retired.
DROP VIEW v_invariant_ledger;
DROP FUNCTION gcos_estate_count();
DROP TABLE gcos_estate_statement;
ALTER TABLE candidate_scan_run DROP COLUMN groups_unchanged;
DROP TABLE governance_recount_request;
DROP TABLE governance_base_count;
DROP TABLE governance_collection_count;
DROP INDEX governance_group_live_base_idx;
ALTER TABLE governance_group DROP COLUMN retired_at;

CREATE VIEW v_invariant_ledger AS
WITH snap AS (
    SELECT id, snapshot_at, metrics FROM evolution_snapshots
    WHERE scope IN ('governance.backfill', 'governance.audit') ORDER BY id DESC LIMIT 1
), snap_groups AS (
    SELECT e.key AS group_key, (e.value ->> 'count')::bigint AS objects FROM snap, jsonb_each(snap.metrics -> 'groups') e
), scopes AS (
    SELECT DISTINCT g.scope FROM snap_groups sg JOIN governance_group g USING (group_key)
), objects AS (
    -- bucket NULL: a relevant object with no coverage outcome, taken out of its group but placed nowhere
    SELECT o.group_key, CASE WHEN o.effective_verdict = 'relevant' AND o.coverage_outcome IS NULL THEN NULL
                             ELSE gcos_invariant_bucket(o.effective_verdict, o.coverage_outcome) END AS bucket,
           count(*) AS n
    FROM v_candidate_object_effective o WHERE o.lifecycle_status = 'active'
    GROUP BY 1, 2
), placed AS (
    SELECT e.scope, CASE WHEN e.effective_verdict = 'relevant' AND e.coverage_outcome IS NULL THEN NULL
                         ELSE gcos_invariant_bucket(e.effective_verdict, e.coverage_outcome) END AS bucket,
           sg.objects - coalesce((SELECT sum(n) FROM objects o WHERE o.group_key = sg.group_key), 0) AS n
    FROM snap_groups sg
    JOIN v_candidate_effective e ON e.group_key = sg.group_key AND e.source_snapshot_ref IS NOT NULL
    UNION ALL
    SELECT g.scope, o.bucket, o.n FROM objects o JOIN governance_group g USING (group_key)
    WHERE o.group_key IN (SELECT group_key FROM snap_groups)
)
SELECT s.scope,
       (SELECT id FROM snap) AS snapshot_id,
       (SELECT (metrics -> 'totals' ->> 'births')::bigint FROM snap) AS total,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'covered'), 0)::bigint AS covered,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'orphans'), 0)::bigint AS orphans,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'approved_exceptions'), 0)::bigint AS approved_exceptions,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'retired_or_ignored'), 0)::bigint AS retired_or_ignored,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'stale'), 0)::bigint AS stale,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'deferred_birth'), 0)::bigint AS deferred_birth,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'class_0'), 0)::bigint AS class_0
FROM scopes s
LEFT JOIN placed p ON p.scope = s.scope
GROUP BY s.scope;
