-- Back to step 008. Superseded rows return to 'active' (008 did not mark them; their ruleset says superseded).
UPDATE governance_candidate_object SET lifecycle_status = 'active' WHERE lifecycle_status = 'superseded';
UPDATE governance_candidate_state SET lifecycle_status = 'active' WHERE lifecycle_status = 'superseded';
DROP INDEX governance_candidate_object_input_ref_idx;
DROP INDEX governance_candidate_object_issue_ref_idx;
DROP INDEX governance_candidate_state_input_ref_idx;
DROP INDEX governance_candidate_state_issue_ref_idx;
DROP TRIGGER governance_audit_row_no_truncate ON governance_audit_row;
DROP TRIGGER candidate_scan_attempt_no_truncate ON candidate_scan_attempt;
DROP TRIGGER candidate_scan_run_no_truncate ON candidate_scan_run;
DROP TRIGGER governance_group_no_truncate ON governance_group;
DROP TRIGGER governance_ruleset_no_truncate ON governance_ruleset;
DROP TRIGGER governance_candidate_coverage_no_truncate ON governance_candidate_coverage;
DROP TRIGGER governance_candidate_object_no_truncate ON governance_candidate_object;
DROP TRIGGER governance_candidate_state_no_truncate ON governance_candidate_state;
DROP FUNCTION gcos_refuse_truncate();
ALTER TABLE gov_worker_cursor
    DROP COLUMN untrusted_rows, DROP COLUMN unmapped_rows, DROP COLUMN future_rows, DROP COLUMN late_rows,
    DROP COLUMN early_ids, DROP COLUMN delivered_ids, DROP COLUMN sweep_next_at, DROP COLUMN sweep_next_id,
    DROP COLUMN swept_id;
DROP TABLE governance_audit_row;
