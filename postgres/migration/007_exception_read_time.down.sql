-- Back to the views of step 004 (a view's columns can only be dropped by recreating it and its dependants).
DROP VIEW v_scan_health;
DROP VIEW v_invariant_ledger;
DROP VIEW v_candidate_object_effective;
DROP VIEW v_candidate_effective;
DROP FUNCTION gcos_coverage_at(text, text, timestamptz, text, text, timestamptz);
DROP FUNCTION gcos_object_fingerprint(text, text);
DROP TABLE gcos_object_fingerprint_statement;

CREATE VIEW v_candidate_effective AS
SELECT g.group_key, g.object_class, g.source_registry, g.axis_family, g.scope, g.lifecycle_status, g.owner_scope,
       g.member_count AS group_member_count,
       c.source_snapshot_ref, cr.ruleset_version, cr.status AS ruleset_status, c.scan_time, c.candidate_verdict,
       c.input_quality_state, c.dirty, c.dirty_reason, c.dirtied_at, c.stale_after, c.recompute_status,
       c.risk_class, c.coverage_required, c.coverage_scan_ref, c.issue_ref, c.last_run_id, c.evidence_fingerprint,
       c.member_count, c.updated_at,
       cov.outcome AS coverage_outcome,
       (s.id IS NOT NULL) AS snapshot_exists,
       (c.group_key IS NOT NULL AND c.recompute_status = 'ok' AND NOT c.dirty AND now() < c.stale_after
        AND cr.status = 'active' AND s.id IS NOT NULL) AS clean,
       CASE
           WHEN c.group_key IS NULL THEN 'unknown'
           WHEN c.candidate_verdict = 'unknown' THEN 'unknown'
           WHEN cr.status = 'draft' THEN 'unknown'
           WHEN c.recompute_status = 'ok' AND NOT c.dirty AND now() < c.stale_after AND cr.status = 'active'
                AND s.id IS NOT NULL THEN c.candidate_verdict
           ELSE 'stale'
       END AS effective_verdict,
       array_remove(ARRAY[
           CASE WHEN c.group_key IS NULL THEN 'never_seeded' END,
           CASE WHEN c.dirty THEN 'dirty' END,
           CASE WHEN c.recompute_status = 'scanning' THEN 'recompute_scanning' END,
           CASE WHEN c.recompute_status = 'failed' THEN 'recompute_failed' END,
           CASE WHEN now() >= c.stale_after THEN 'expired' END,
           CASE WHEN cr.status = 'draft' THEN 'ruleset_draft' END,
           CASE WHEN c.group_key IS NOT NULL AND s.id IS NULL THEN 'snapshot_dangling' END
       ], NULL) AS reasons
FROM governance_group g
CROSS JOIN v_current_ruleset cr
LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = cr.ruleset_version
LEFT JOIN evolution_snapshots s ON s.id = c.source_snapshot_ref
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = g.group_key AND cov.ruleset_version = cr.ruleset_version;

CREATE VIEW v_candidate_object_effective AS
SELECT o.candidate_key, o.object_type, o.object_ref, o.materialization_reason, o.group_key, g.scope,
       o.source_snapshot_ref, o.ruleset_version, cr.status AS ruleset_status, o.scan_time, o.candidate_verdict,
       o.input_quality_state, o.dirty, o.stale_after, o.recompute_status, o.risk_class, o.coverage_required,
       o.coverage_scan_ref, o.lifecycle_status, cov.outcome AS coverage_outcome, (s.id IS NOT NULL) AS snapshot_exists,
       CASE
           WHEN o.candidate_verdict = 'unknown' THEN 'unknown'
           WHEN cr.status = 'draft' THEN 'unknown'
           WHEN o.recompute_status = 'ok' AND NOT o.dirty AND now() < o.stale_after AND cr.status = 'active'
                AND s.id IS NOT NULL THEN o.candidate_verdict
           ELSE 'stale'
       END AS effective_verdict
FROM governance_candidate_object o
JOIN v_current_ruleset cr ON cr.ruleset_version = o.ruleset_version
JOIN governance_group g ON g.group_key = o.group_key
LEFT JOIN evolution_snapshots s ON s.id = o.source_snapshot_ref
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = 'object:' || o.candidate_key AND cov.ruleset_version = o.ruleset_version;

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

CREATE VIEW v_scan_health AS
SELECT
    (SELECT count(*) FROM v_candidate_effective WHERE dirty) AS dirty_groups,
    (SELECT min(dirtied_at) FROM v_candidate_effective WHERE dirty) AS oldest_dirty_at,
    (SELECT count(*) FROM v_candidate_effective WHERE recompute_status = 'failed') AS failed_groups,
    (SELECT count(*) FROM v_candidate_effective WHERE stale_after <= now()) AS expired_groups,
    (SELECT count(*) FROM v_candidate_effective WHERE source_snapshot_ref IS NULL) AS unseeded_groups,
    (SELECT count(*) FROM governance_group) AS groups,
    (SELECT jsonb_object_agg(mode, jsonb_build_object('run_id', run_id, 'started_at', started_at,
                                                      'finished_at', finished_at, 'status', status,
                                                      'groups_scanned', groups_scanned))
     FROM (SELECT DISTINCT ON (mode) mode, run_id, started_at, finished_at, status, groups_scanned
           FROM candidate_scan_run ORDER BY mode, started_at DESC) last) AS last_runs;

ALTER TABLE governance_candidate_coverage DROP COLUMN exception_expires_at, DROP COLUMN exception_fingerprint;
