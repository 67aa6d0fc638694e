DROP TABLE governance_group;
DROP TABLE governance_ruleset;
