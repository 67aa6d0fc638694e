-- Back to step 010: the views read the terms recorded with the outcome (step 007); scans no longer queue objects.
ALTER TABLE governance_candidate_object DROP COLUMN group_evidence;
DROP TABLE governance_object_base;
DROP TABLE governance_object_pending;
CREATE OR REPLACE VIEW v_candidate_effective AS
SELECT g.group_key, g.object_class, g.source_registry, g.axis_family, g.scope, g.lifecycle_status, g.owner_scope,
       g.member_count AS group_member_count,
       c.source_snapshot_ref, cr.ruleset_version, cr.status AS ruleset_status, c.scan_time, c.candidate_verdict,
       c.input_quality_state, c.dirty, c.dirty_reason, c.dirtied_at, c.stale_after, c.recompute_status,
       c.risk_class, c.coverage_required, c.coverage_scan_ref, c.issue_ref, c.last_run_id, c.evidence_fingerprint,
       c.member_count, c.updated_at,
       -- a group's exception pins no object fingerprint
       gcos_coverage_at(cov.outcome, cov.owner_ref, cov.exception_expires_at, NULL, NULL, now()) AS coverage_outcome,
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
       ], NULL) AS reasons,
       cov.outcome AS recorded_coverage_outcome, cov.exception_id, cov.exception_expires_at
FROM governance_group g
CROSS JOIN v_current_ruleset cr
LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = cr.ruleset_version
LEFT JOIN evolution_snapshots s ON s.id = c.source_snapshot_ref
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = g.group_key AND cov.ruleset_version = cr.ruleset_version;

CREATE OR REPLACE VIEW v_candidate_object_effective AS
SELECT o.candidate_key, o.object_type, o.object_ref, o.materialization_reason, o.group_key, g.scope,
       o.source_snapshot_ref, o.ruleset_version, cr.status AS ruleset_status, o.scan_time, o.candidate_verdict,
       o.input_quality_state, o.dirty, o.stale_after, o.recompute_status, o.risk_class, o.coverage_required,
       o.coverage_scan_ref, o.lifecycle_status,
       gcos_coverage_at(cov.outcome, cov.owner_ref, cov.exception_expires_at, cov.exception_fingerprint,
                        CASE WHEN cov.exception_fingerprint IS NOT NULL
                             THEN gcos_object_fingerprint(split_part(o.object_ref, ':', 1),
                                                          substr(o.object_ref, strpos(o.object_ref, ':') + 1)) END,
                        now()) AS coverage_outcome,
       (s.id IS NOT NULL) AS snapshot_exists,
       CASE
           WHEN o.candidate_verdict = 'unknown' THEN 'unknown'
           WHEN cr.status = 'draft' THEN 'unknown'
           WHEN o.recompute_status = 'ok' AND NOT o.dirty AND now() < o.stale_after AND cr.status = 'active'
                AND s.id IS NOT NULL THEN o.candidate_verdict
           ELSE 'stale'
       END AS effective_verdict,
       cov.outcome AS recorded_coverage_outcome, cov.exception_id, cov.exception_expires_at
FROM governance_candidate_object o
JOIN v_current_ruleset cr ON cr.ruleset_version = o.ruleset_version
JOIN governance_group g ON g.group_key = o.group_key
LEFT JOIN evolution_snapshots s ON s.id = o.source_snapshot_ref
LEFT JOIN governance_candidate_coverage cov ON cov.candidate_ref = 'object:' || o.candidate_key AND cov.ruleset_version = o.ruleset_version;

DROP FUNCTION gcos_exception_held(text, timestamptz);
DROP FUNCTION gcos_coverage_now(text, text, text, text, text, text, text, timestamptz);
DROP FUNCTION gcos_exception_holds(jsonb, text, text, text, text, timestamptz);
DROP FUNCTION gcos_exception_row(text);
