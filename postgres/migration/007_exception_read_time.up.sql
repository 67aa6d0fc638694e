-- Exceptions counted at read time (SPEC §12): a coverage outcome that rests on an exception records the terms it
-- rests on, so every read stops counting it the instant it expires, with no scan needed.
ALTER TABLE governance_candidate_coverage
    ADD COLUMN exception_expires_at  timestamptz, -- the exception's expires_at when the outcome was recorded
    ADD COLUMN exception_fingerprint text;        -- the object fingerprint an exception on one object pins

-- Outcomes recorded before this step carry no terms: take them from the exception registry when there is one.
DO $$
BEGIN
    IF to_regclass('governance_exception') IS NOT NULL THEN
        UPDATE governance_candidate_coverage c SET exception_expires_at = x.expires_at
        FROM governance_exception x WHERE x.exception_id = c.exception_id;
    END IF;
END $$;

-- How to read an object's fingerprint now under the configured source binding (its table and column names are
-- configuration, so no view can name them): the statement is recorded by the transaction that records coverage
-- pinned to an object's fingerprint, so wherever a pin exists the statement that checks it exists too.
CREATE TABLE gcos_object_fingerprint_statement (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    statement   text        NOT NULL, -- SELECT <fingerprint text> FROM <births> WHERE <collection> = $1 AND <code> = $2
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- The object's fingerprint now (gcos.Fingerprint.String of its birth row), or NULL when it has no birth or no
-- statement was recorded: a pinned exception then lapses (unknown is never safe).
CREATE FUNCTION gcos_object_fingerprint(collection text, code text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    stmt text;
    fp   text;
BEGIN
    SELECT statement INTO stmt FROM gcos_object_fingerprint_statement;
    IF stmt IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE stmt INTO fp USING collection, code;
    RETURN fp;
END
$$;

-- The coverage in force at a given time (mirrors gcos.CoverageRecord.At): a recorded approved_exception lapses
-- once its expires_at is reached, or once the object it pins (exception_fingerprint) no longer has that fingerprint
-- (object_fingerprint, read now); the owner (covered) or its absence (orphan) then takes over, as a scan at that
-- time would resolve it.
CREATE FUNCTION gcos_coverage_at(outcome text, owner_ref text, exception_expires_at timestamptz,
                                 exception_fingerprint text, object_fingerprint text, at timestamptz)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN outcome = 'approved_exception'
             AND ((exception_expires_at IS NOT NULL AND at >= exception_expires_at)
                  OR (exception_fingerprint IS NOT NULL AND object_fingerprint IS DISTINCT FROM exception_fingerprint))
            THEN CASE WHEN coalesce(owner_ref, '') <> '' THEN 'covered' ELSE 'orphan' END
        ELSE outcome
    END
$$;

-- The effective views read coverage through it; the recorded outcome and the exception stay visible beside it.
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
