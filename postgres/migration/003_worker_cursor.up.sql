-- The intake cursors (SPEC §3.2, §9.2; doc 32 §5): one row per tailed source, in iu_route_worker_cursor's shape
-- plus what a lossless tail needs. The position is kept in the source's own type, so a value is never converted
-- on its way in or out: position_tstz for a timestamptz order key, position_ts for a timestamp-without-time-zone one
-- (whose values are local times in time_zone). A NULL position means "before the first row".

CREATE TABLE gov_worker_cursor (
    worker_name      text        PRIMARY KEY CHECK (worker_name ~ '^[a-z][a-z0-9_.:-]*$'),
    source           text        NOT NULL UNIQUE CHECK (source ~ '^[a-z][a-z0-9_.]*$'),
    -- the binding: which table and order key the position refers to (data, not code)
    source_table     text        NOT NULL CHECK (source_table <> ''),
    ts_column        text        NOT NULL CHECK (ts_column <> ''),
    id_column        text        NOT NULL CHECK (id_column <> ''),
    ts_type          text        NOT NULL CHECK (ts_type IN ('timestamptz', 'timestamp')),
    time_zone        text,
    -- the position: every row with (ts, id) greater than it is still to be handed off
    position_tstz    timestamptz,
    position_ts      timestamp,
    position_id      bigint,
    -- iu_route_worker_cursor's columns: last_created_at is the position as an instant, last_event_id its id
    last_created_at  timestamptz,
    last_event_id    text,
    events_seen      bigint      NOT NULL DEFAULT 0 CHECK (events_seen >= 0),
    attempts_written bigint      NOT NULL DEFAULT 0 CHECK (attempts_written >= 0),
    dead_lettered    bigint      NOT NULL DEFAULT 0 CHECK (dead_lettered >= 0),
    last_run_at      timestamptz,
    last_run_summary jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(last_run_summary) = 'object'),
    metadata         jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    -- the last visibility horizon a poll read below (diagnostics: how far the source was readable)
    last_horizon     timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    -- a timestamptz source keeps no zone and no local position; a timestamp source needs its zone
    CHECK ((ts_type = 'timestamptz' AND time_zone IS NULL AND position_ts IS NULL)
        OR (ts_type = 'timestamp' AND time_zone IS NOT NULL AND time_zone <> '' AND position_tstz IS NULL)),
    -- a position is a (ts, id) pair or nothing
    CHECK ((position_id IS NULL) = (position_tstz IS NULL AND position_ts IS NULL)),
    CHECK ((position_id IS NULL) = (last_event_id IS NULL)),
    CHECK (last_event_id IS NULL OR last_event_id = position_id::text),
    -- for a timestamptz source the iu-shaped last_created_at is the position itself
    CHECK (ts_type <> 'timestamptz' OR last_created_at IS NOT DISTINCT FROM position_tstz)
);
