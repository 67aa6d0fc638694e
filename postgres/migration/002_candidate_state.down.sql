DROP TABLE candidate_scan_run;
DROP TABLE governance_candidate_object;
DROP TABLE governance_candidate_state;
DROP FUNCTION gcos_refuse_delete();
