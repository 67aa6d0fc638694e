-- Back to step 014.
DROP TABLE gcos_verdict_change;
