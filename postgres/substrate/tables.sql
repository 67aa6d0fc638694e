-- Greenfield DDL of the substrate tables GCOS reuses (SPEC §3.1).
-- Each statement block is applied only when its table is absent; GCOS never alters an existing substrate table.
-- Blocks are separated by a line "-- table: <name>" so the installer can run each one on its own.

-- table: birth_registry
CREATE TABLE birth_registry (
    id                bigserial PRIMARY KEY,
    entity_code       text        NOT NULL,
    collection_name   text        NOT NULL,
    entity_type       text        NOT NULL,
    status            text        NOT NULL,
    born_at           timestamptz NOT NULL DEFAULT now(),
    canonical_address text,
    parent_code       text,
    source_system     text,
    actor_ref         text
);
CREATE INDEX birth_registry_born_at_id_idx ON birth_registry (born_at, id);
CREATE UNIQUE INDEX birth_registry_collection_code_key ON birth_registry (collection_name, entity_code);

-- table: registry_changelog
CREATE TABLE registry_changelog (
    id           bigserial PRIMARY KEY,
    entity_type  text,
    entity_code  text,
    action       text,
    "timestamp"  timestamp NOT NULL DEFAULT now(),
    alert_level  text      NOT NULL DEFAULT 'info',
    resolved     boolean   NOT NULL DEFAULT false,
    changed_by   text,
    alert_detail text
);
CREATE INDEX registry_changelog_timestamp_id_idx ON registry_changelog ("timestamp", id);

-- table: collection_registry
CREATE TABLE collection_registry (
    collection_name text PRIMARY KEY,
    coverage_status text,
    scope_class     text
);

-- table: meta_catalog
CREATE TABLE meta_catalog (
    entity_type         text PRIMARY KEY,
    registry_collection text
);

-- table: measurement_registry
CREATE TABLE measurement_registry (
    measurement_id   text PRIMARY KEY,
    measurement_name text,
    law_code         text     NOT NULL,
    method           smallint,
    source_query     text     NOT NULL,
    target_query     text     NOT NULL,
    comparison       text     DEFAULT 'strict_equals',
    severity         text,
    enabled          boolean  DEFAULT true,
    auto_generated   boolean  DEFAULT false
);

-- table: pivot_definitions
CREATE TABLE pivot_definitions (
    pivot_code  text PRIMARY KEY,
    axis_family text,
    entity_type text
);

-- table: law_jurisdiction
CREATE TABLE law_jurisdiction (
    law_code        text PRIMARY KEY,
    scope_code      text,
    entity_type     text,
    collection_name text
);

-- table: normative_registry
CREATE TABLE normative_registry (
    norm_code text PRIMARY KEY,
    title     text,
    body      text
);

-- table: law_catalog
CREATE TABLE law_catalog (
    law_code text PRIMARY KEY,
    title    text,
    version  text
);

-- table: governance_docs
CREATE TABLE governance_docs (
    doc_code text PRIMARY KEY,
    title    text,
    body     text
);

-- table: evolution_snapshots
CREATE TABLE evolution_snapshots (
    id             serial PRIMARY KEY,
    snapshot_at    timestamptz NOT NULL DEFAULT now(),
    scope          text        NOT NULL DEFAULT 'global',
    metrics        jsonb       NOT NULL,
    delta_previous jsonb       DEFAULT '{}',
    notes          text
);

-- table: system_issues
CREATE TABLE system_issues (
    id                  bigserial PRIMARY KEY,
    issue_type          text,
    severity            text,
    coalesce_key        text,
    occurrence_count    integer NOT NULL DEFAULT 1,
    reopen_count        integer NOT NULL DEFAULT 0,
    business_logic_hash text,
    violation_hash      text,
    run_id              text,
    parent_issue_id     bigint,
    evidence_snapshot   json,
    status              text,
    title               text,
    first_seen_at       timestamptz DEFAULT now(),
    last_seen_at        timestamptz DEFAULT now(),
    resolved_at         timestamptz
);

-- table: event_type_registry
CREATE TABLE event_type_registry (
    event_domain     text        NOT NULL,
    event_type       text        NOT NULL,
    event_stream     text        NOT NULL,
    delivery_lane    text        NOT NULL DEFAULT 'immediate',
    default_severity text,
    description      text        NOT NULL,
    active           boolean     NOT NULL DEFAULT true,
    created_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_domain, event_type)
);

-- table: event_outbox
CREATE TABLE event_outbox (
    id                     uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    event_domain           text        NOT NULL,
    event_type             text        NOT NULL,
    event_stream           text        NOT NULL,
    delivery_lane          text        NOT NULL,
    event_severity         text,
    event_subject_table    text        NOT NULL,
    event_subject_ref      text,
    canonical_address      text        NOT NULL,
    actor_ref              text        NOT NULL,
    source_system          text        NOT NULL,
    correlation_id         text,
    payload_classification text        NOT NULL DEFAULT 'safe_metadata',
    safe_payload           jsonb       NOT NULL DEFAULT '{}',
    occurred_at            timestamptz DEFAULT now(),
    created_at             timestamptz DEFAULT now()
);

-- table: event_pending
CREATE TABLE event_pending (
    id                bigserial PRIMARY KEY,
    event_domain      text    NOT NULL,
    event_type_hint   text    NOT NULL,
    entity_table      text    NOT NULL,
    entity_ref        text,
    canonical_address text    NOT NULL,
    actor_ref         text    NOT NULL,
    capture_payload   jsonb,
    processed_at      timestamptz,
    error_count       integer NOT NULL DEFAULT 0,
    last_error        text,
    next_attempt_at   timestamptz,
    dead_lettered_at  timestamptz,
    created_at        timestamptz DEFAULT now()
);

-- table: event_subscription
CREATE TABLE event_subscription (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    recipient_ref       text    NOT NULL,
    event_domain        text,
    event_type          text,
    event_stream        text,
    scope_subject_table text,
    scope_filter        jsonb   NOT NULL DEFAULT '{}',
    mute                boolean NOT NULL DEFAULT false,
    created_at          timestamptz DEFAULT now()
);

-- table: event_read
CREATE TABLE event_read (
    event_id           uuid        NOT NULL,
    actor_ref          text        NOT NULL,
    read_at            timestamptz NOT NULL DEFAULT now(),
    read_status_source text        NOT NULL,
    PRIMARY KEY (event_id, actor_ref)
);

-- table: queue_heartbeat
CREATE TABLE queue_heartbeat (
    executor_name    text PRIMARY KEY,
    executor_kind    text,
    last_tick_at     timestamptz,
    last_tick_status text,
    lease_owner      text,
    lease_expires_at timestamptz
);

-- table: iu_route_worker_cursor
CREATE TABLE iu_route_worker_cursor (
    worker_name      text PRIMARY KEY,
    source           text,
    last_created_at  timestamptz,
    last_event_id    text,
    events_seen      bigint NOT NULL DEFAULT 0,
    attempts_written bigint NOT NULL DEFAULT 0,
    dead_lettered    bigint NOT NULL DEFAULT 0,
    last_run_at      timestamptz,
    last_run_summary jsonb,
    metadata         jsonb NOT NULL DEFAULT '{}'
);

-- table: governance_coverage_profile
CREATE TABLE governance_coverage_profile (
    entity_type                 text PRIMARY KEY,
    risk_class                  text,
    coverage_required           boolean,
    privacy                     text,
    independently_authoritative boolean NOT NULL DEFAULT false,
    write_path                  boolean NOT NULL DEFAULT false
);

-- table: governance_responsibility_scope
CREATE TABLE governance_responsibility_scope (
    scope_code         text PRIMARY KEY,
    default_owner_hint text
);

-- table: governance_object_ownership
CREATE TABLE governance_object_ownership (
    id              bigserial PRIMARY KEY,
    scope_code      text NOT NULL,
    entity_type     text,
    collection_name text,
    owner_ref       text NOT NULL,
    status          text NOT NULL DEFAULT 'active'
);

-- table: governance_exception
CREATE TABLE governance_exception (
    exception_id    text PRIMARY KEY,
    scope_code      text,
    entity_type     text,
    collection_name text,
    entity_code     text,
    approval_ref    text,
    expires_at      timestamptz,
    fingerprint     text,
    status          text NOT NULL DEFAULT 'approved'
);
