DROP VIEW v_scan_health;
DROP VIEW v_invariant_ledger;
DROP FUNCTION gcos_invariant_bucket(text, text);
DROP VIEW v_candidate_object_effective;
DROP VIEW v_candidate_effective;
DROP VIEW v_current_ruleset;
DROP TABLE candidate_scan_attempt;
DROP INDEX governance_candidate_object_ref_idx;
DROP TABLE governance_candidate_coverage;
