-- Back to step 022: the logs are plain tables again, pruned by DELETE; every row kept moves back.
ALTER TABLE gcos_verdict_change RENAME TO gcos_verdict_change_partitioned;
ALTER INDEX gcos_verdict_change_pkey RENAME TO gcos_verdict_change_partitioned_pkey;
ALTER INDEX gcos_verdict_change_changed_at RENAME TO gcos_verdict_change_partitioned_changed_at;
ALTER INDEX gcos_verdict_change_xid RENAME TO gcos_verdict_change_partitioned_xid;
CREATE TABLE gcos_verdict_change (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    changed_at       timestamptz NOT NULL DEFAULT now(),
    subject          text        NOT NULL CHECK (subject IN ('group', 'object')),
    key              text        NOT NULL,
    object_ref       text,
    group_key        text        NOT NULL,
    scope            text,
    ruleset_version  text        NOT NULL,
    verdict_before   text        NOT NULL,
    verdict_after    text        NOT NULL,
    coverage_before  text,
    coverage_after   text,
    why              text        NOT NULL,
    dirtied_at       timestamptz,
    run_id           text        NOT NULL,
    xid              xid8        NOT NULL DEFAULT pg_current_xact_id()
);
CREATE INDEX gcos_verdict_change_changed_at ON gcos_verdict_change (changed_at);
CREATE INDEX gcos_verdict_change_xid ON gcos_verdict_change (xid);
INSERT INTO gcos_verdict_change OVERRIDING SYSTEM VALUE
    SELECT id, changed_at, subject, key, object_ref, group_key, scope, ruleset_version, verdict_before, verdict_after,
           coverage_before, coverage_after, why, dirtied_at, run_id, xid
    FROM gcos_verdict_change_partitioned;
SELECT setval(pg_get_serial_sequence('gcos_verdict_change', 'id'),
              coalesce((SELECT max(id) FROM gcos_verdict_change_partitioned), 0) + 1, false);
DROP TABLE gcos_verdict_change_partitioned;

ALTER TABLE gcos_change_feed RENAME TO gcos_change_feed_partitioned;
ALTER INDEX gcos_change_feed_xid RENAME TO gcos_change_feed_partitioned_xid;
CREATE TABLE gcos_change_feed (
    xid  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    kind text NOT NULL CHECK (kind IN ('group', 'state', 'object', 'coverage', 'ruleset', 'birth')),
    key  text NOT NULL
);
CREATE INDEX gcos_change_feed_xid ON gcos_change_feed (xid);
INSERT INTO gcos_change_feed (xid, kind, key) SELECT xid, kind, key FROM gcos_change_feed_partitioned;
DROP TABLE gcos_change_feed_partitioned;
