-- GCOS's growing logs, partitioned by time: the verdict change log by changed_at, the change feed by noted_at (the
-- time its note was written; the feed is read by transaction id, and kept by it). Retention drops a partition once
-- every row in it is past the log's retention and every transaction that wrote it lies below the reader's mark
-- (postgres.MaintainLogTx), and moves the log's horizon just past the newest transaction dropped, as the DELETE did:
-- at 10⁸ births a day's DELETE leaves millions of dead rows to vacuum, a DROP leaves none. The time partitions are
-- made ahead by the same maintenance (their width is configuration); a row no partition takes yet lands in the
-- default partition, never refused, and is moved into its own partition at the next maintenance. Rows already
-- logged start in the default partition.

-- The verdict change log. A partitioned table's unique key must hold its partition key: (id, changed_at); the id
-- stays unique by its identity.
ALTER TABLE gcos_verdict_change RENAME TO gcos_verdict_change_unpartitioned;
ALTER INDEX gcos_verdict_change_pkey RENAME TO gcos_verdict_change_unpartitioned_pkey;
ALTER INDEX gcos_verdict_change_changed_at RENAME TO gcos_verdict_change_unpartitioned_changed_at;
ALTER INDEX gcos_verdict_change_xid RENAME TO gcos_verdict_change_unpartitioned_xid;
CREATE TABLE gcos_verdict_change (
    id               bigint      GENERATED ALWAYS AS IDENTITY,
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
    xid              xid8        NOT NULL DEFAULT pg_current_xact_id(),
    PRIMARY KEY (id, changed_at)
) PARTITION BY RANGE (changed_at);
CREATE INDEX gcos_verdict_change_changed_at ON gcos_verdict_change (changed_at);
CREATE INDEX gcos_verdict_change_xid ON gcos_verdict_change (xid);
CREATE TABLE gcos_verdict_change_default PARTITION OF gcos_verdict_change DEFAULT;
INSERT INTO gcos_verdict_change OVERRIDING SYSTEM VALUE
    SELECT id, changed_at, subject, key, object_ref, group_key, scope, ruleset_version, verdict_before, verdict_after,
           coverage_before, coverage_after, why, dirtied_at, run_id, xid
    FROM gcos_verdict_change_unpartitioned;
SELECT setval(pg_get_serial_sequence('gcos_verdict_change', 'id'),
              coalesce((SELECT max(id) FROM gcos_verdict_change_unpartitioned), 0) + 1, false);
DROP TABLE gcos_verdict_change_unpartitioned;

-- The change feed.
ALTER TABLE gcos_change_feed RENAME TO gcos_change_feed_unpartitioned;
ALTER INDEX gcos_change_feed_xid RENAME TO gcos_change_feed_unpartitioned_xid;
CREATE TABLE gcos_change_feed (
    xid      xid8        NOT NULL DEFAULT pg_current_xact_id(),
    kind     text        NOT NULL CHECK (kind IN ('group', 'state', 'object', 'coverage', 'ruleset', 'birth')),
    key      text        NOT NULL,
    noted_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY RANGE (noted_at);
CREATE INDEX gcos_change_feed_xid ON gcos_change_feed (xid);
CREATE TABLE gcos_change_feed_default PARTITION OF gcos_change_feed DEFAULT;
INSERT INTO gcos_change_feed (xid, kind, key) SELECT xid, kind, key FROM gcos_change_feed_unpartitioned;
DROP TABLE gcos_change_feed_unpartitioned;
