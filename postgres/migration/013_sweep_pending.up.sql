-- The out-of-order sweep's start (SPEC §9.2). When a cursor's sweep starts (its first poll, or after a reset), the
-- ids up to the largest one visible are taken as accounted for; an id not visible then may belong to a transaction
-- still open, which can commit a row whose key sorts behind the cursor. sweep_pending holds those ids (the gaps
-- below the start's mark): once every transaction open at the start has ended, the rows among them behind the
-- cursor that were never handed off are handed off, and the set is cleared.
ALTER TABLE gov_worker_cursor ADD COLUMN sweep_pending int8multirange NOT NULL DEFAULT '{}';
