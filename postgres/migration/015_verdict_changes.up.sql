-- The verdict change log: each time a scan changes a group's or an object row's candidate verdict or coverage
-- outcome, one row says what it was, what it became, why the scan ran (the dirty mark's reason: handoff:<kind>,
-- axis, ruleset_bump, authority, snapshot_drift, ttl, input; 'rescan' when the group was not dirty, e.g. the full
-- audit) and when that mark was made, so change→verdict latency is changed_at − dirtied_at. GET /v1/changes and the
-- dashboard's live feed read it, newest first. Rows older than scan.verdict_changes_keep are pruned.
CREATE TABLE gcos_verdict_change (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at       timestamptz NOT NULL DEFAULT now(),
    subject          text        NOT NULL CHECK (subject IN ('group', 'object')),
    key              text        NOT NULL, -- the group key, or the object row's candidate key
    object_ref       text,                 -- the object (object rows only)
    group_key        text        NOT NULL,
    scope            text,
    ruleset_version  text        NOT NULL,
    verdict_before   text        NOT NULL,
    verdict_after    text        NOT NULL,
    coverage_before  text,                 -- covered, orphan, approved_exception; NULL when not relevant
    coverage_after   text,
    why              text        NOT NULL,
    dirtied_at       timestamptz,
    run_id           text        NOT NULL
);
CREATE INDEX gcos_verdict_change_changed_at ON gcos_verdict_change (changed_at);
