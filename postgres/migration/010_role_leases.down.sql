-- Back to step 009: abandoned runs read as failed (they did not succeed).
DROP INDEX candidate_scan_run_completed_idx;
DROP INDEX candidate_scan_run_running_idx;
UPDATE candidate_scan_run SET status = 'failed' WHERE status = 'abandoned';
ALTER TABLE candidate_scan_run DROP COLUMN lease_epoch, DROP COLUMN lease_role;
ALTER TABLE candidate_scan_run DROP CONSTRAINT candidate_scan_run_status_check;
ALTER TABLE candidate_scan_run ADD CONSTRAINT candidate_scan_run_status_check
    CHECK (status IN ('running', 'succeeded', 'failed'));
DROP TABLE governance_role_lease;
