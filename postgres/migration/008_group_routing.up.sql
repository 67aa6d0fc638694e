-- Groups follow the substrate (SPEC §4, §8; doc 40 §40.8): a scan counts a group's members now and
-- moves them to the group their dimensions name now; a group left without members, or whose key no longer
-- follows from the registries (an owner or axis family moved), is retired, never deleted, and the gate no longer
-- consults it. The ledger counts the estate now, not the last snapshot.

ALTER TABLE governance_group ADD COLUMN retired_at timestamptz;
-- The gate looks up an object's live groups by its base (class, registry, lifecycle).
CREATE INDEX governance_group_live_base_idx ON governance_group (object_class, source_registry, lifecycle_status)
    WHERE retired_at IS NULL;

-- Member counts kept by the births handoff, so a scan reads counts instead of births: a collection with a row
-- here has its base groups' counts exact through the births cursor (the handoff adds each page's births in the
-- transaction that advances the cursor, and counts a collection it finds uncounted from the source). A change that
-- can move births between base groups (a lifecycle move, audit drift) files a recount request; the next births
-- handoff drops the collection's counts, and until it counts them again a scan counts that collection itself. A
-- cursor reset (replay) drops every count.
CREATE TABLE governance_collection_count (
    source_registry text        PRIMARY KEY,
    counted_at      timestamptz NOT NULL DEFAULT now() -- when it was last counted from the source
);
CREATE TABLE governance_recount_request (
    id              bigserial   PRIMARY KEY,
    source_registry text        NOT NULL,
    reason          text        NOT NULL,
    requested_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX governance_recount_request_registry_idx ON governance_recount_request (source_registry);
CREATE TABLE governance_base_count (
    source_registry  text   NOT NULL REFERENCES governance_collection_count ON DELETE CASCADE,
    object_class     text   NOT NULL,
    lifecycle_status text   NOT NULL,
    members          bigint NOT NULL CHECK (members >= 0),
    PRIMARY KEY (source_registry, object_class, lifecycle_status)
);

-- Early cutoff: scans whose result equalled the stored verdict (only the qualification moved).
ALTER TABLE candidate_scan_run ADD COLUMN groups_unchanged bigint NOT NULL DEFAULT 0;

-- How to count the estate now under the configured source binding (its table is configuration, so no view can
-- name it): recorded by each backfill and full audit, as gcos_object_fingerprint_statement is.
CREATE TABLE gcos_estate_statement (
    singleton   boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    statement   text        NOT NULL, -- SELECT count(*) FROM <births>
    recorded_at timestamptz NOT NULL DEFAULT now()
);

-- The number of born objects now, or NULL when no statement was recorded (the ledger then cannot close).
CREATE FUNCTION gcos_estate_count() RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    stmt text;
    n    bigint;
BEGIN
    SELECT statement INTO stmt FROM gcos_estate_statement;
    IF stmt IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE stmt INTO n;
    RETURN n;
END
$$;

-- The coverage invariant per scope, in objects, against the estate now: total is every born object (each belongs
-- to one group per scope). Each live group's members, as its last scan counted them, land in the bucket of its
-- candidate row, except materialized objects, which land in their own. Objects no group has counted yet (born,
-- or moved, since their group's last scan) are counted as stale, and so are the members of a group the last
-- full snapshot did not know that no scan has judged yet: unknown is never safe, and never silent. A group the
-- snapshot knew with no candidate row under the current ruleset, or a relevant group or object with no coverage
-- outcome, places its objects nowhere, so the ledger does not close; nor does it when an object is counted twice.
-- snapshot_id is the full snapshot (backfill or audit) the candidate rows are qualified by.
CREATE OR REPLACE VIEW v_invariant_ledger AS
WITH snap AS (
    SELECT id, metrics FROM evolution_snapshots
    WHERE scope IN ('governance.backfill', 'governance.audit') ORDER BY id DESC LIMIT 1
), estate AS (
    SELECT gcos_estate_count() AS births
), live AS (
    SELECT g.group_key FROM governance_group g WHERE g.retired_at IS NULL
), scopes AS (
    SELECT DISTINCT g.scope FROM governance_group g WHERE g.retired_at IS NULL
), objects AS (
    SELECT o.group_key, CASE WHEN o.effective_verdict = 'relevant' AND o.coverage_outcome IS NULL THEN NULL
                             ELSE gcos_invariant_bucket(o.effective_verdict, o.coverage_outcome) END AS bucket,
           count(*) AS n
    FROM v_candidate_object_effective o WHERE o.lifecycle_status = 'active'
    GROUP BY 1, 2
), groups AS (
    SELECT e.scope,
           CASE WHEN e.member_count IS NULL AND (SELECT metrics -> 'groups' FROM snap) ? e.group_key THEN NULL
                WHEN e.effective_verdict = 'relevant' AND e.coverage_outcome IS NULL THEN NULL
                ELSE gcos_invariant_bucket(e.effective_verdict, e.coverage_outcome) END AS bucket,
           coalesce(e.member_count, e.group_member_count) AS members,
           coalesce(e.member_count, e.group_member_count)
               - coalesce((SELECT sum(n) FROM objects o WHERE o.group_key = e.group_key), 0) AS n
    FROM v_candidate_effective e JOIN live l USING (group_key)
), placed AS (
    SELECT scope, bucket, n FROM groups
    UNION ALL
    SELECT g.scope, o.bucket, o.n FROM objects o JOIN governance_group g USING (group_key)
), unplaced AS (
    SELECT s.scope, greatest((SELECT births FROM estate) - coalesce((SELECT sum(members) FROM groups g WHERE g.scope = s.scope), 0), 0) AS n
    FROM scopes s
)
SELECT s.scope,
       (SELECT id FROM snap) AS snapshot_id,
       (SELECT births FROM estate) AS total,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'covered'), 0)::bigint AS covered,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'orphans'), 0)::bigint AS orphans,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'approved_exceptions'), 0)::bigint AS approved_exceptions,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'retired_or_ignored'), 0)::bigint AS retired_or_ignored,
       (coalesce(sum(p.n) FILTER (WHERE p.bucket = 'stale'), 0) + (SELECT n FROM unplaced u WHERE u.scope = s.scope))::bigint AS stale,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'deferred_birth'), 0)::bigint AS deferred_birth,
       coalesce(sum(p.n) FILTER (WHERE p.bucket = 'class_0'), 0)::bigint AS class_0,
       (SELECT n FROM unplaced u WHERE u.scope = s.scope)::bigint AS unplaced
FROM scopes s
LEFT JOIN placed p ON p.scope = s.scope
GROUP BY s.scope;
