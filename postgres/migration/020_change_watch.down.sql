-- Back to step 019: the change log is read by time again (GET /v1/changes?since=), and the registries reach GCOS
-- through their change-ledger rows alone.
DROP TABLE gcos_registry_poll;
DROP TABLE gcos_registry_row;
DROP TABLE gcos_verdict_change_horizon;
DROP INDEX gcos_verdict_change_xid;
ALTER TABLE gcos_verdict_change DROP COLUMN xid;
