DROP TABLE gov_worker_cursor;
