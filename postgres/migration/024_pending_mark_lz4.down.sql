-- Back to step 023: pending marks compressed with the server's default method again (values kept so far stay as
-- they were written; both methods read back alike).
ALTER TABLE governance_pending_mark
    ALTER COLUMN group_keys SET COMPRESSION DEFAULT,
    ALTER COLUMN reasons SET COMPRESSION DEFAULT,
    ALTER COLUMN marked_at SET COMPRESSION DEFAULT,
    ALTER COLUMN births SET COMPRESSION DEFAULT;
