-- Coverage results, scan retry bookkeeping and the summary views the API and dashboard read (SPEC §3.2, §7, §12).

-- The T6 minimum the invariant needs: how a relevant group (or object) is covered under a ruleset.
CREATE TABLE governance_candidate_coverage (
    candidate_ref     text        NOT NULL,  -- a group_key, or 'object:' || candidate_key
    ruleset_version   text        NOT NULL REFERENCES governance_ruleset (ruleset_version),
    outcome           text        NOT NULL CHECK (outcome IN ('covered', 'orphan', 'approved_exception')),
    owner_ref         text,
    exception_id      text,
    coverage_scan_ref text        NOT NULL,
    computed_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (candidate_ref, ruleset_version)
);

CREATE INDEX governance_candidate_object_ref_idx ON governance_candidate_object (object_ref);

-- Retry bookkeeping of failed group re-evaluations (bounded exponential backoff).
CREATE TABLE candidate_scan_attempt (
    group_key       text        NOT NULL,
    ruleset_version text        NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_error      text,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_key, ruleset_version)
);

-- The ruleset verdicts are read under: the active one, else (before any activation) the newest draft.
CREATE VIEW v_current_ruleset AS
SELECT ruleset_version, status, proposed_at, activated_at
FROM governance_ruleset
WHERE status = 'active'
   OR (status = 'draft' AND NOT EXISTS (SELECT 1 FROM governance_ruleset WHERE status = 'active')
       AND proposed_at = (SELECT max(proposed_at) FROM governance_ruleset WHERE status = 'draft'))
ORDER BY proposed_at DESC, ruleset_version
LIMIT 1;

-- Every group with its verdict as of now() under the current ruleset. Clean is the decaying conjunction of SPEC §7;
-- a group with no row under the current ruleset is unknown (never seeded). A draft ruleset reads as unknown for
-- every group here (the gate, which knows the configured low-risk classes, refines that per risk).
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

-- Materialized objects with their effective verdict, same rules as groups.
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

-- The bucket of SPEC §12 for an effective verdict and coverage outcome (mirrors gcos.BucketFor).
CREATE FUNCTION gcos_invariant_bucket(effective text, coverage text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN effective = 'relevant' AND coverage = 'covered' THEN 'covered'
        WHEN effective = 'relevant' AND coverage = 'approved_exception' THEN 'approved_exceptions'
        WHEN effective = 'relevant' THEN 'orphans'
        WHEN effective IN ('not_relevant', 'retired') THEN 'retired_or_ignored'
        WHEN effective IN ('stale', 'unknown', 'needs_input') THEN 'stale'
        WHEN effective = 'deferred_birth' THEN 'deferred_birth'
        WHEN effective = 'class_0' THEN 'class_0'
        ELSE 'stale' -- an unrecognised verdict never looks better than the data (as gcos.BucketFor)
    END
$$;

-- The coverage invariant per scope, in objects, against the latest full snapshot (backfill or audit): total is
-- the snapshot's birth count (every object belongs to one group per scope); each snapshot group's objects land in
-- the bucket of its candidate row, except materialized objects, which land in their own. A group of the snapshot
-- with no candidate row under the current ruleset lands nowhere, so the ledger does not close; so does a relevant
-- group or object with no coverage outcome under it (every scan writes the outcome with the verdict, so a missing
-- one is drift, never an orphan to be counted quietly).
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

-- Scan health: the dirty set, failures, expiry and the last run per mode.
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
