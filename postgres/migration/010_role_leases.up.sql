-- Singleton roles (the full audit, the backfill, event promotion, snapshot pruning, the silent-gap monitor) are held by short leases
-- that their holder renews while it works. The epoch grows with every change of holder; the transaction that
-- commits a role's work checks that its holder's epoch is still the lease's (fencing), so a process that was paused
-- or cut off past its lease can never commit work its successor is doing.
CREATE TABLE governance_role_lease (
    role       text PRIMARY KEY,
    owner      text,
    epoch      bigint      NOT NULL DEFAULT 0,
    taken_at   timestamptz,
    renewed_at timestamptz,
    expires_at timestamptz
);

-- A run its process did not finish (killed, cut off) is marked abandoned by whoever next takes its role; its
-- partial products are never used (an audit's snapshot is a baseline only once its run succeeded).
ALTER TABLE candidate_scan_run DROP CONSTRAINT candidate_scan_run_status_check;
ALTER TABLE candidate_scan_run ADD CONSTRAINT candidate_scan_run_status_check
    CHECK (status IN ('running', 'succeeded', 'failed', 'abandoned'));
ALTER TABLE candidate_scan_run ADD COLUMN lease_role text, ADD COLUMN lease_epoch bigint;
CREATE INDEX candidate_scan_run_running_idx ON candidate_scan_run (mode) WHERE status = 'running';
-- The last completed audit (or backfill) decides when the next is due and is its baseline.
CREATE INDEX candidate_scan_run_completed_idx ON candidate_scan_run (finished_at)
    WHERE status = 'succeeded' AND mode IN ('full_audit', 'backfill');
