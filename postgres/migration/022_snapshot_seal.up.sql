-- A captured snapshot is immutable (append-only, never updated). Its row lives in the substrate's
-- evolution_snapshots, which GCOS never alters (no trigger, no privilege change there), so GCOS seals each capture in
-- a table of its own: the seal holds the row's digest, and any update, delete or truncate of a seal is refused. The
-- full audit compares every snapshot a verdict is keyed to with its seal.

-- The digest of a snapshot row: its columns as one canonical jsonb array (the time as microseconds since the epoch,
-- so no session time zone enters it), SHA-256, hex.
CREATE FUNCTION gcos_snapshot_digest(p_id bigint, p_at timestamptz, p_scope text, p_metrics jsonb, p_delta jsonb, p_notes text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT encode(sha256(convert_to(jsonb_build_array(p_id, (extract(epoch FROM p_at) * 1000000)::bigint, p_scope,
        p_metrics, p_delta, p_notes)::text, 'UTF8')), 'hex')
$$;

CREATE TABLE gcos_snapshot_seal (
    snapshot_id bigint PRIMARY KEY,
    scope       text NOT NULL,
    digest      text NOT NULL,
    sealed_at   timestamptz NOT NULL DEFAULT now()
);

CREATE FUNCTION gcos_snapshot_seal_refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'gcos_snapshot_seal is append-only: a captured snapshot is immutable (% refused)', TG_OP
        USING ERRCODE = 'integrity_constraint_violation';
END
$$;

CREATE TRIGGER gcos_snapshot_seal_immutable BEFORE UPDATE OR DELETE ON gcos_snapshot_seal
    FOR EACH ROW EXECUTE FUNCTION gcos_snapshot_seal_refuse();
CREATE TRIGGER gcos_snapshot_seal_no_truncate BEFORE TRUNCATE ON gcos_snapshot_seal
    FOR EACH STATEMENT EXECUTE FUNCTION gcos_snapshot_seal_refuse();

-- The snapshots captured before this step are sealed as they are now.
INSERT INTO gcos_snapshot_seal (snapshot_id, scope, digest)
SELECT id, scope, gcos_snapshot_digest(id, snapshot_at, scope, metrics, delta_previous, notes)
FROM evolution_snapshots WHERE scope LIKE 'governance.%';
