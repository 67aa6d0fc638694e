-- Back to step 012.
ALTER TABLE gov_worker_cursor DROP COLUMN sweep_pending;
