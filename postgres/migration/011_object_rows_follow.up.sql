-- The exception registry's current row decides at read time (SPEC §12): a recorded outcome approved_exception
-- counts only while the exception, as governance_exception holds it now, still holds on the row it was recorded on.
-- A revocation, an expiry moved into the past, a changed scope or object, or a broken pin stops it suppressing at
-- once, with no scan; the terms recorded with the outcome are kept only to show what was recorded.

-- The exception's current row as jsonb, or NULL when the row or the optional registry is gone (then it lapses:
-- unknown is never safe). Dynamic, so the function exists whether or not the registry does.
CREATE FUNCTION gcos_exception_row(id text) RETURNS jsonb
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r jsonb;
BEGIN
    IF id IS NULL OR to_regclass('governance_exception') IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE 'SELECT to_jsonb(x) FROM governance_exception x WHERE x.exception_id = $1' INTO r USING id;
    RETURN r;
END
$$;

-- Whether exception x (its current row) suppresses at `at` on a row of (scope, class, registry), or on object
-- object_ref (collection:code) for an object row: mirrors gcos.ExceptionRow.HoldsFor.
CREATE FUNCTION gcos_exception_holds(x jsonb, scope text, class text, registry text, object_ref text, at timestamptz)
RETURNS boolean LANGUAGE sql STABLE AS $$
    SELECT x IS NOT NULL
       AND x ->> 'status' = 'approved' AND coalesce(x ->> 'approval_ref', '') <> ''
       AND (x ->> 'expires_at' IS NULL OR at < (x ->> 'expires_at')::timestamptz)
       AND CASE
           WHEN x ->> 'entity_code' IS NULL THEN
               (x ->> 'scope_code' IS NULL OR x ->> 'scope_code' = scope)
               AND (x ->> 'entity_type' IS NULL OR x ->> 'entity_type' = class)
               AND (x ->> 'collection_name' IS NULL OR x ->> 'collection_name' = registry)
           ELSE
               coalesce(x ->> 'scope_code', '') <> '' AND x ->> 'scope_code' = scope
               AND coalesce(x ->> 'collection_name', '') || ':' || (x ->> 'entity_code') = object_ref
               AND coalesce(x ->> 'fingerprint', '') <> ''
               AND x ->> 'fingerprint' = gcos_object_fingerprint(coalesce(x ->> 'collection_name', ''), x ->> 'entity_code')
       END
$$;

-- The coverage in force at `at` (mirrors gcos.CoverageRecord.At): a recorded approved_exception that no longer
-- holds is lifted, and the owner (covered) or its absence (orphan) takes over.
CREATE FUNCTION gcos_coverage_now(outcome text, owner_ref text, exception_id text, scope text, class text,
                                  registry text, object_ref text, at timestamptz)
RETURNS text LANGUAGE sql STABLE AS $$
    SELECT CASE
        WHEN outcome = 'approved_exception'
             AND NOT gcos_exception_holds(gcos_exception_row(exception_id), scope, class, registry, object_ref, at)
            THEN CASE WHEN coalesce(owner_ref, '') <> '' THEN 'covered' ELSE 'orphan' END
        ELSE outcome
    END
$$;

CREATE OR REPLACE VIEW v_candidate_effective AS
SELECT g.group_key, g.object_class, g.source_registry, g.axis_family, g.scope, g.lifecycle_status, g.owner_scope,
       g.member_count AS group_member_count,
       c.source_snapshot_ref, cr.ruleset_version, cr.status AS ruleset_status, c.scan_time, c.candidate_verdict,
       c.input_quality_state, c.dirty, c.dirty_reason, c.dirtied_at, c.stale_after, c.recompute_status,
       c.risk_class, c.coverage_required, c.coverage_scan_ref, c.issue_ref, c.last_run_id, c.evidence_fingerprint,
       c.member_count, c.updated_at,
       gcos_coverage_now(cov.outcome, cov.owner_ref, cov.exception_id, g.scope, g.object_class, g.source_registry,
                         NULL, now()) AS coverage_outcome,
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
       gcos_coverage_now(cov.outcome, cov.owner_ref, cov.exception_id, g.scope, g.object_class, g.source_registry,
                         o.object_ref, now()) AS coverage_outcome,
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

-- Whether the exception registry holds an approved, unexpired exception naming object object_ref (collection:code)
-- at `at`: what keeps an object row materialized for an exception (mirrors gcos.ExceptionRow.Approved). Without
-- the registry nothing is excepted.
CREATE FUNCTION gcos_exception_held(object_ref text, at timestamptz) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    held boolean;
BEGIN
    IF to_regclass('governance_exception') IS NULL THEN
        RETURN false;
    END IF;
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM governance_exception x
                            WHERE x.entity_code IS NOT NULL AND x.collection_name || '':'' || x.entity_code = $1
                              AND x.status = ''approved'' AND coalesce(x.approval_ref, '''') <> ''''
                              AND (x.expires_at IS NULL OR $2 < x.expires_at))'
        INTO held USING object_ref, at;
    RETURN held;
END
$$;

-- Object rows follow their group without re-reading every birth of its base on every scan. The intake queues the
-- objects a scan must look at one by one — a birth of a class whose objects have rows, an object a change row
-- names — in the transaction that hands them off (lossless: the queue row and the cursor advance commit
-- together); the scan of the object's base takes them in the transaction that derives their rows.
CREATE TABLE governance_object_pending (
    collection_name  text        NOT NULL,
    entity_code      text        NOT NULL,
    object_class     text        NOT NULL, -- the object's base when queued
    source_registry  text        NOT NULL,
    lifecycle_status text        NOT NULL,
    queued_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (collection_name, entity_code)
);
CREATE INDEX governance_object_pending_base_idx ON governance_object_pending (object_class, source_registry, lifecycle_status);

-- The bases whose objects were all derived from their births under a ruleset (the backfill, the full audit, or a
-- scan's first pass over the base under that ruleset): after that, the queue brings their new objects.
CREATE TABLE governance_object_base (
    ruleset_version  text        NOT NULL REFERENCES governance_ruleset (ruleset_version),
    object_class     text        NOT NULL,
    source_registry  text        NOT NULL,
    lifecycle_status text        NOT NULL,
    derived_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (ruleset_version, object_class, source_registry, lifecycle_status)
);

-- The evidence of the group evaluation an object row was judged from: a scan's pass reads a clean row again only
-- when its group's evaluation moved.
ALTER TABLE governance_candidate_object ADD COLUMN group_evidence text;
