-- Back to step 011: audits no longer record what they proved.
ALTER TABLE candidate_scan_run
    DROP CONSTRAINT candidate_scan_run_verify_slice_check,
    DROP COLUMN verify_slice,
    DROP COLUMN verify_slices,
    DROP COLUMN verify_collections,
    DROP COLUMN verify_groups,
    DROP COLUMN verify_objects,
    DROP COLUMN verify_gate_checks,
    DROP COLUMN verify_mismatches,
    DROP COLUMN verified_at;
