-- Back to step 021: snapshots are no longer sealed (the seals go with their table and its triggers).
DROP TABLE gcos_snapshot_seal;
DROP FUNCTION gcos_snapshot_seal_refuse();
DROP FUNCTION gcos_snapshot_digest(bigint, timestamptz, text, jsonb, jsonb, text);
