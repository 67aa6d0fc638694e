DROP INDEX IF EXISTS governance_group_first_seen_idx;
