-- The candidate-state store (SPEC §3.2, doc 40 §40.4): one verdict per group per ruleset, always qualified by
-- (source snapshot, ruleset version, scan time). There is deliberately no "checked" flag: stale_after is NOT NULL
-- and must lie after scan_time, so every verdict carries its own expiry.

CREATE TABLE governance_candidate_state (
    group_key            text        NOT NULL REFERENCES governance_group (group_key),
    -- No foreign key: a pruned snapshot must be detectable as dangling (snapshot_ref_dangling), not cascade.
    source_snapshot_ref  integer     NOT NULL,
    ruleset_version      text        NOT NULL REFERENCES governance_ruleset (ruleset_version),
    scan_time            timestamptz NOT NULL,
    candidate_verdict    text        NOT NULL CHECK (candidate_verdict IN
        ('relevant', 'not_relevant', 'class_0', 'deferred_birth', 'retired', 'needs_input', 'unknown')),
    input_quality_state  text CHECK (input_quality_state IN
        ('accepted_for_candidate_scan', 'incomplete_input', 'invalid_schema', 'duplicate', 'conflict',
         'stale_input', 'untrusted_source', 'quarantined', 'birth_or_registry_missing', 'needs_backfill')),
    input_quality_ref    bigint,
    dirty                boolean     NOT NULL DEFAULT false,
    dirty_reason         text CHECK (dirty_reason ~ '^(handoff:[a-z_]+|axis|ruleset_bump|authority|snapshot_drift|ttl|input)$'),
    dirtied_at           timestamptz,
    depends_on           jsonb       NOT NULL DEFAULT '{}',
    stale_after          timestamptz NOT NULL,
    recompute_status     text        NOT NULL DEFAULT 'ok' CHECK (recompute_status IN ('ok', 'dirty', 'scanning', 'failed')),
    risk_class           text        NOT NULL,
    coverage_required    boolean     NOT NULL,
    coverage_scan_ref    text,
    issue_ref            bigint,
    last_run_id          text,
    evidence_fingerprint text,
    lifecycle_status     text        NOT NULL DEFAULT 'active' CHECK (lifecycle_status IN ('active', 'superseded', 'retired')),
    audit_ref            text,
    owner_scope          text,
    member_count         bigint      NOT NULL DEFAULT 0 CHECK (member_count >= 0),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    UNIQUE (group_key, ruleset_version),
    CHECK (stale_after > scan_time),
    CHECK (NOT dirty OR (dirty_reason IS NOT NULL AND dirtied_at IS NOT NULL))
);
CREATE INDEX governance_candidate_state_dirty_idx ON governance_candidate_state (dirtied_at) WHERE dirty;
CREATE INDEX governance_candidate_state_stale_after_idx ON governance_candidate_state (stale_after);
CREATE INDEX governance_candidate_state_ruleset_idx ON governance_candidate_state (ruleset_version, group_key);

-- Selectively materialized objects (doc 40 §40.6). Rows are never deleted: a lapsed reason makes a tombstone.
CREATE TABLE governance_candidate_object (
    candidate_key          text        NOT NULL,
    object_type            text        NOT NULL,
    object_ref             text        NOT NULL,
    materialization_reason text        NOT NULL CHECK (materialization_reason IN
        ('independently_authoritative', 'open_finding', 'exception', 'high_risk_write_path')),
    group_key              text        NOT NULL REFERENCES governance_group (group_key),
    source_snapshot_ref    integer     NOT NULL,
    ruleset_version        text        NOT NULL REFERENCES governance_ruleset (ruleset_version),
    scan_time              timestamptz NOT NULL,
    candidate_verdict      text        NOT NULL CHECK (candidate_verdict IN
        ('relevant', 'not_relevant', 'class_0', 'deferred_birth', 'retired', 'needs_input', 'unknown')),
    input_quality_state    text CHECK (input_quality_state IN
        ('accepted_for_candidate_scan', 'incomplete_input', 'invalid_schema', 'duplicate', 'conflict',
         'stale_input', 'untrusted_source', 'quarantined', 'birth_or_registry_missing', 'needs_backfill')),
    input_quality_ref      bigint,
    dirty                  boolean     NOT NULL DEFAULT false,
    dirty_reason           text CHECK (dirty_reason ~ '^(handoff:[a-z_]+|axis|ruleset_bump|authority|snapshot_drift|ttl|input)$'),
    dirtied_at             timestamptz,
    depends_on             jsonb       NOT NULL DEFAULT '{}',
    stale_after            timestamptz NOT NULL,
    recompute_status       text        NOT NULL DEFAULT 'ok' CHECK (recompute_status IN ('ok', 'dirty', 'scanning', 'failed')),
    risk_class             text        NOT NULL,
    coverage_required      boolean     NOT NULL,
    coverage_scan_ref      text,
    issue_ref              bigint,
    last_run_id            text,
    evidence_fingerprint   text,
    lifecycle_status       text        NOT NULL DEFAULT 'active' CHECK (lifecycle_status IN ('active', 'superseded', 'retired')),
    audit_ref              text,
    owner_scope            text,
    member_count           bigint      NOT NULL DEFAULT 1 CHECK (member_count = 1),
    created_at             timestamptz NOT NULL DEFAULT now(),
    updated_at             timestamptz NOT NULL DEFAULT now(),
    UNIQUE (candidate_key, ruleset_version),
    CHECK (stale_after > scan_time),
    CHECK (NOT dirty OR (dirty_reason IS NOT NULL AND dirtied_at IS NOT NULL))
);
CREATE INDEX governance_candidate_object_group_idx ON governance_candidate_object (group_key);

-- Nothing in GCOS ever hard-deletes a candidate row; the database refuses it too.
CREATE FUNCTION gcos_refuse_delete() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'gcos: % rows are never deleted (retire them instead)', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END $$;
CREATE TRIGGER governance_candidate_state_no_delete BEFORE DELETE ON governance_candidate_state
    FOR EACH ROW EXECUTE FUNCTION gcos_refuse_delete();
CREATE TRIGGER governance_candidate_object_no_delete BEFORE DELETE ON governance_candidate_object
    FOR EACH ROW EXECUTE FUNCTION gcos_refuse_delete();

-- The scan run ledger.
CREATE TABLE candidate_scan_run (
    run_id               text PRIMARY KEY,
    mode                 text        NOT NULL CHECK (mode IN ('backfill', 'event', 'incremental', 'full_audit')),
    phase                text        NOT NULL CHECK (phase IN ('seeding', 'reconciling', 'scanning', 'auditing')),
    started_at           timestamptz NOT NULL DEFAULT now(),
    finished_at          timestamptz,
    source_snapshot_ref  integer,
    ruleset_version      text,
    cursor_positions     jsonb       NOT NULL DEFAULT '{}',
    groups_scanned       bigint      NOT NULL DEFAULT 0,
    groups_dirtied       bigint      NOT NULL DEFAULT 0,
    verdict_changes      bigint      NOT NULL DEFAULT 0,
    objects_materialized bigint      NOT NULL DEFAULT 0,
    objects_retired      bigint      NOT NULL DEFAULT 0,
    status               text        NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'succeeded', 'failed')),
    error                text
);
CREATE INDEX candidate_scan_run_started_idx ON candidate_scan_run (started_at DESC);
