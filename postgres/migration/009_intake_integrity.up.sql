-- Intake integrity (SPEC §9, §11; doc 32 §4–§5, doc 40 §40.4): GCOS's own audit rows are recognised by id, not by
-- name; rows the order key misplaces (behind the cursor, in the future) are found and delivered; history cannot be
-- truncated away.

-- Every registry_changelog row GCOS writes is recorded here in the same transaction: the intake's echo test is
-- membership in this table, which no other writer can forge by naming itself 'gcos:…'.
CREATE TABLE governance_audit_row (
    changelog_id bigint      PRIMARY KEY,
    written_at   timestamptz NOT NULL DEFAULT now()
);
-- GCOS's audit rows written before this step are recognised the old way once, here (reading the ledger, never
-- writing it).
DO $$
BEGIN
    IF to_regclass('registry_changelog') IS NOT NULL THEN
        INSERT INTO governance_audit_row (changelog_id)
        SELECT id FROM registry_changelog WHERE changed_by LIKE 'gcos:%' AND entity_type LIKE 'governance\_%';
    END IF;
END $$;

-- The out-of-order sweep of each tailed source (see postgres/tail.go): every row with id <= swept_id has been
-- accounted for; delivered_ids are the ids above it the tail has handed off; sweep_next_id is the next mark, safe
-- once no transaction that was open at sweep_next_at is still open. early_ids are rows handed off ahead of the
-- cursor (their order key lies in the future); the cursor skips them when it reaches them.
ALTER TABLE gov_worker_cursor
    ADD COLUMN swept_id       bigint,
    ADD COLUMN sweep_next_id  bigint,
    ADD COLUMN sweep_next_at  timestamptz,
    ADD COLUMN delivered_ids  int8multirange NOT NULL DEFAULT '{}',
    ADD COLUMN early_ids      bigint[]       NOT NULL DEFAULT '{}',
    ADD COLUMN late_rows      bigint         NOT NULL DEFAULT 0 CHECK (late_rows >= 0),
    ADD COLUMN future_rows    bigint         NOT NULL DEFAULT 0 CHECK (future_rows >= 0),
    ADD COLUMN unmapped_rows  bigint         NOT NULL DEFAULT 0 CHECK (unmapped_rows >= 0),
    ADD COLUMN untrusted_rows bigint         NOT NULL DEFAULT 0 CHECK (untrusted_rows >= 0);

-- History is kept: candidate state, rulesets, groups and GCOS's run and audit ledgers refuse TRUNCATE (the row
-- triggers that refuse DELETE do not fire on it).
CREATE FUNCTION gcos_refuse_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'gcos: % is history and is never truncated', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER governance_candidate_state_no_truncate BEFORE TRUNCATE ON governance_candidate_state
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();
CREATE TRIGGER governance_candidate_object_no_truncate BEFORE TRUNCATE ON governance_candidate_object
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();
CREATE TRIGGER governance_candidate_coverage_no_truncate BEFORE TRUNCATE ON governance_candidate_coverage
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();
CREATE TRIGGER governance_ruleset_no_truncate BEFORE TRUNCATE ON governance_ruleset
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();
CREATE TRIGGER governance_group_no_truncate BEFORE TRUNCATE ON governance_group
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();
CREATE TRIGGER candidate_scan_run_no_truncate BEFORE TRUNCATE ON candidate_scan_run
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();
CREATE TRIGGER candidate_scan_attempt_no_truncate BEFORE TRUNCATE ON candidate_scan_attempt
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();
CREATE TRIGGER governance_audit_row_no_truncate BEFORE TRUNCATE ON governance_audit_row
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_refuse_truncate();

-- issue_ref / input_quality_ref point at a row's open finding and are cleared when it closes (doc 40 §40.4);
-- audit_ref is the registry_changelog id of the audited operation that last wrote the row (backfill capture,
-- activation, full audit). The partial indexes serve the clearing.
CREATE INDEX governance_candidate_state_issue_ref_idx ON governance_candidate_state (issue_ref) WHERE issue_ref IS NOT NULL;
CREATE INDEX governance_candidate_state_input_ref_idx ON governance_candidate_state (input_quality_ref) WHERE input_quality_ref IS NOT NULL;
CREATE INDEX governance_candidate_object_issue_ref_idx ON governance_candidate_object (issue_ref) WHERE issue_ref IS NOT NULL;
CREATE INDEX governance_candidate_object_input_ref_idx ON governance_candidate_object (input_quality_ref) WHERE input_quality_ref IS NOT NULL;

-- A row under a ruleset that is no longer active is history: lifecycle superseded (doc 40 §40.4).
UPDATE governance_candidate_state c SET lifecycle_status = 'superseded'
FROM governance_ruleset r
WHERE r.ruleset_version = c.ruleset_version AND r.status = 'superseded' AND c.lifecycle_status = 'active';
UPDATE governance_candidate_object o SET lifecycle_status = 'superseded'
FROM governance_ruleset r
WHERE r.ruleset_version = o.ruleset_version AND r.status = 'superseded' AND o.lifecycle_status = 'active';
