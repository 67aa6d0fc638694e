-- The change feed the gate's in-process verdict view catches up from (SPEC §12 freshness). Every statement that
-- writes a table the gate reads notes the keys it touched, stamped with its transaction's id; a reader that keeps
-- the pg_current_snapshot() of its last catch-up reads exactly the notes of the transactions that committed since
-- (xid >= the snapshot's xmin AND not visible in it), whatever order ids were assigned and commits happened in.
-- No NOTIFY: a notifying commit takes a database-wide lock that serializes every other notifying commit, which under
-- churn cost the intake and the scans more than polling costs the readers.
CREATE TABLE gcos_change_feed (
    xid  xid8 NOT NULL DEFAULT pg_current_xact_id(),
    kind text NOT NULL CHECK (kind IN ('group', 'state', 'object', 'coverage', 'ruleset', 'birth')),
    key  text NOT NULL
);
CREATE INDEX gcos_change_feed_xid ON gcos_change_feed (xid);

-- Notes below pruned_below are gone: a reader whose last snapshot's xmin lies below it may have missed some and
-- reloads everything.
CREATE TABLE gcos_change_feed_horizon (
    one          boolean PRIMARY KEY DEFAULT true CHECK (one),
    pruned_below xid8 NOT NULL
);
INSERT INTO gcos_change_feed_horizon (pruned_below) VALUES ('0');

-- gcos_note_change(kind, key column): a statement-level trigger over the transition table "changed".
CREATE FUNCTION gcos_note_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('INSERT INTO gcos_change_feed (kind, key) SELECT DISTINCT %L, %I::text FROM changed',
                   TG_ARGV[0], TG_ARGV[1]);
    RETURN NULL;
END $$;

DO $$
DECLARE
    t record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('governance_group', 'group', 'group_key'),
        ('governance_candidate_state', 'state', 'group_key'),
        ('governance_candidate_object', 'object', 'object_ref'),
        ('governance_candidate_coverage', 'coverage', 'candidate_ref'),
        ('governance_ruleset', 'ruleset', 'ruleset_version')) AS v(tbl, kind, col)
    LOOP
        EXECUTE format('CREATE TRIGGER gcos_feed_insert AFTER INSERT ON %I REFERENCING NEW TABLE AS changed
                        FOR EACH STATEMENT EXECUTE FUNCTION gcos_note_change(%L, %L)', t.tbl, t.kind, t.col);
        EXECUTE format('CREATE TRIGGER gcos_feed_update AFTER UPDATE ON %I REFERENCING NEW TABLE AS changed
                        FOR EACH STATEMENT EXECUTE FUNCTION gcos_note_change(%L, %L)', t.tbl, t.kind, t.col);
        EXECUTE format('CREATE TRIGGER gcos_feed_delete AFTER DELETE ON %I REFERENCING OLD TABLE AS changed
                        FOR EACH STATEMENT EXECUTE FUNCTION gcos_note_change(%L, %L)', t.tbl, t.kind, t.col);
    END LOOP;
END $$;
