package migration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/postgres/migration"
	"gcos/postgres/pgtest"
	"gcos/postgres/substrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// substrateDB is an empty database with only the substrate tables, which GCOS's views read.
func substrateDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.NewEmptyDB(t)
	if _, err := substrate.Create(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return pool
}

// schemaSignature renders every table, column, constraint, index and view of the public schema, so two schemas can
// be compared exactly.
func schemaSignature(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var sig string
	err := pool.QueryRow(context.Background(), `
		SELECT coalesce(string_agg(line, E'\n' ORDER BY line), '') FROM (
			SELECT 'col ' || table_name || '.' || column_name || ' ' || data_type || ' ' || is_nullable || ' ' || coalesce(column_default, '') AS line
			FROM information_schema.columns WHERE table_schema = 'public'
			UNION ALL
			SELECT 'con ' || conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid)
			FROM pg_constraint WHERE connamespace = 'public'::regnamespace
			UNION ALL
			SELECT 'idx ' || indexname || ' ' || indexdef FROM pg_indexes WHERE schemaname = 'public'
			UNION ALL
			SELECT 'view ' || viewname || ' ' || definition FROM pg_views WHERE schemaname = 'public'
			UNION ALL
			SELECT 'fn ' || proname || ' ' || md5(prosrc) FROM pg_proc WHERE pronamespace = 'public'::regnamespace
			UNION ALL
			SELECT 'trg ' || tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
			WHERE c.relnamespace = 'public'::regnamespace AND NOT tgisinternal
		) s WHERE line NOT LIKE '%gcos_schema_migration%'`).Scan(&sig)
	if err != nil {
		t.Fatal(err)
	}
	return sig
}

func TestUpDownUpRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := substrateDB(t)
	m, err := migration.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	empty := schemaSignature(t, pool)
	applied, err := m.Up(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(applied) != m.Latest() {
		t.Fatalf("applied %v, want %d steps", applied, m.Latest())
	}
	first := schemaSignature(t, pool)
	if first == empty {
		t.Fatal("up changed nothing")
	}
	again, err := m.Up(ctx)
	if err != nil || len(again) != 0 {
		t.Fatalf("second up applied %v, err %v; want nothing", again, err)
	}
	reverted, err := m.Down(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(reverted) != m.Latest() {
		t.Fatalf("reverted %v", reverted)
	}
	if diff := cmp.Diff(empty, schemaSignature(t, pool)); diff != "" {
		t.Fatalf("down did not restore the empty schema (-want +got):\n%s", diff)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(first, schemaSignature(t, pool)); diff != "" {
		t.Fatalf("up → down → up changed the schema (-first +second):\n%s", diff)
	}
	st, err := m.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Applied {
			t.Fatalf("step %d not applied after up", s.Version)
		}
	}
}

func TestEachStepDownRestoresPreviousSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := substrateDB(t)
	m, err := migration.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	// Walk up one step at a time by applying all and reverting, recording each level's signature.
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	sigs := map[int]string{m.Latest(): schemaSignature(t, pool)}
	for v := m.Latest(); v > 0; v-- {
		if _, err := m.Down(ctx, 1); err != nil {
			t.Fatalf("down from %d: %v", v, err)
		}
		sigs[v-1] = schemaSignature(t, pool)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if got := schemaSignature(t, pool); got != sigs[m.Latest()] {
		t.Fatal("re-applying every step gave a different schema")
	}
}

func TestConcurrentMigratorsApplyEachStepOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := substrateDB(t)
	errs := make(chan error, 4)
	counts := make(chan int, 4)
	for range 4 {
		go func() {
			m, err := migration.New(pool)
			if err != nil {
				errs <- err
				return
			}
			applied, err := m.Up(ctx)
			counts <- len(applied)
			errs <- err
		}()
	}
	total := 0
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		total += <-counts
	}
	m, _ := migration.New(pool)
	if total != m.Latest() {
		t.Fatalf("steps applied across 4 concurrent migrators = %d, want %d", total, m.Latest())
	}
}

func TestParseRefusesBadSets(t *testing.T) {
	t.Parallel()
	cases := map[string]fstest.MapFS{
		"no down": {"001_a.up.sql": {Data: []byte("SELECT 1")}},
		"gap": {
			"001_a.up.sql": {Data: []byte("SELECT 1")}, "001_a.down.sql": {Data: []byte("SELECT 1")},
			"003_c.up.sql": {Data: []byte("SELECT 1")}, "003_c.down.sql": {Data: []byte("SELECT 1")},
		},
		"duplicate": {
			"001_a.up.sql": {Data: []byte("SELECT 1")}, "001_a.down.sql": {Data: []byte("SELECT 1")},
			"001_b.up.sql": {Data: []byte("SELECT 1")},
		},
		"bad name": {"1_a.up.sql": {Data: []byte("SELECT 1")}},
	}
	for name, fsys := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if _, err := migration.ParseFS(fsys); err == nil {
				t.Fatalf("%s: accepted", name)
			} else if !strings.Contains(err.Error(), "migration") {
				t.Fatalf("%s: unclear error %v", name, err)
			}
		})
	}
}

// TestFindingsSelectorRowsAreCarried: step 21 carries the rows "every finding" made before it (a subject table of
// system_issues) to the selector by transition, dropping one the recipient already has in the new form; its down
// turns them back.
// atStep is a database migrated all the way up and back down to step, and its migrator: a step's down runs as it
// would on a database that had every later step applied.
func atStep(t *testing.T, step int) (*pgxpool.Pool, *migration.Migrator) {
	t.Helper()
	ctx := context.Background()
	pool := substrateDB(t)
	m, err := migration.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, m.Latest()-step); err != nil {
		t.Fatal(err)
	}
	return pool, m
}

func TestFindingsSelectorRowsAreCarried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := atStep(t, 20)
	if _, err := pool.Exec(ctx, `INSERT INTO event_subscription (recipient_ref, event_domain, scope_subject_table, scope_filter, mute) VALUES
		('alice', 'governance', 'system_issues', '{}', true),
		('bob', 'governance', 'system_issues', '{}', true),
		('bob', 'governance', NULL, '{"transition": ["opened", "reopened", "resolved"]}', true),
		('carol', 'other', 'system_issues', '{}', true)`); err != nil {
		t.Fatal(err)
	}
	rows := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(format('%s/%s/%s/%s', recipient_ref, event_domain, coalesce(scope_subject_table, '-'), scope_filter), ' '
			ORDER BY recipient_ref, scope_subject_table) FROM event_subscription`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := `alice/governance/-/{"transition": ["opened", "reopened", "resolved"]} bob/governance/-/{"transition": ["opened", "reopened", "resolved"]} carol/other/system_issues/{}`
	if got := rows(); got != want {
		t.Fatalf("after step 21:\n got %s\nwant %s", got, want)
	}
	if _, err := m.Down(ctx, m.Latest()-20); err != nil { // step 21's down (and those of the steps after it)
		t.Fatal(err)
	}
	want = `alice/governance/system_issues/{} bob/governance/system_issues/{} carol/other/system_issues/{}`
	if got := rows(); got != want {
		t.Fatalf("after step 21's down:\n got %s\nwant %s", got, want)
	}
}

// TestSnapshotSealsAreImmutable: step 22 seals the snapshots captured before it, a seal can be neither updated,
// deleted nor truncated, and its down removes the seals with their table and functions.
func TestSnapshotSealsAreImmutable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := atStep(t, 21)
	if _, err := pool.Exec(ctx, `INSERT INTO evolution_snapshots (id, snapshot_at, scope, metrics, notes) VALUES
		(7, '2026-11-01T00:00:00Z', 'governance.audit', '{"groups": {}}', 'before step 22'), (8, now(), 'global', '{}', 'not GCOS''s')`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var ids []int64
	if err := pool.QueryRow(ctx, `SELECT array_agg(snapshot_id ORDER BY snapshot_id) FROM gcos_snapshot_seal`).Scan(&ids); err != nil || len(ids) != 1 || ids[0] != 7 {
		t.Fatalf("seals after step 22: %v %v, want [7] (GCOS's snapshot only)", ids, err)
	}
	var matches bool
	if err := pool.QueryRow(ctx, `SELECT gcos_snapshot_digest(s.id, s.snapshot_at, s.scope, s.metrics, s.delta_previous, s.notes) = z.digest
		FROM evolution_snapshots s JOIN gcos_snapshot_seal z ON z.snapshot_id = s.id`).Scan(&matches); err != nil || !matches {
		t.Fatalf("the seal does not match its snapshot: %v %v", matches, err)
	}
	// The digest does not depend on the session's time zone.
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var again bool
	if _, err := conn.Exec(ctx, `SET timezone = 'Pacific/Kiritimati'`); err != nil {
		t.Fatal(err)
	}
	err = conn.QueryRow(ctx, `SELECT gcos_snapshot_digest(s.id, s.snapshot_at, s.scope, s.metrics, s.delta_previous, s.notes) = z.digest
		FROM evolution_snapshots s JOIN gcos_snapshot_seal z ON z.snapshot_id = s.id`).Scan(&again)
	_, _ = conn.Exec(ctx, `RESET timezone`)
	conn.Release()
	if err != nil || !again {
		t.Fatalf("the digest moved with the session's time zone: %v %v", again, err)
	}
	for _, stmt := range []string{`UPDATE gcos_snapshot_seal SET digest = 'forged'`, `DELETE FROM gcos_snapshot_seal WHERE snapshot_id = 7`, `TRUNCATE gcos_snapshot_seal`} {
		if _, err := pool.Exec(ctx, stmt); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want it refused", stmt, err)
		}
	}
	if _, err := m.Down(ctx, m.Latest()-21); err != nil {
		t.Fatal(err)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname = 'gcos_snapshot_seal'`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("step 22's down left its table: %d %v", left, err)
	}
}

// TestPartitionedLogsCarryTheirRows: step 23 moves the verdict change log and the change feed into partitioned
// tables with every row (the verdict changes' ids go on from where they were), and its down moves them back, the
// rows of the time partitions made since included.
func TestPartitionedLogsCarryTheirRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := atStep(t, 22)
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	rows := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT (SELECT string_agg(format('%s:%s', id, key), ' ' ORDER BY id) FROM gcos_verdict_change)
			|| ' / ' || (SELECT string_agg(key, ' ' ORDER BY key) FROM gcos_change_feed)`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	change := func(key string) string {
		return fmt.Sprintf(`INSERT INTO gcos_verdict_change (subject, key, group_key, ruleset_version, verdict_before, verdict_after, why, run_id)
			VALUES ('group', '%s', '%[1]s', 'rs', 'unknown', 'relevant', 'rescan', 'run')`, key)
	}
	exec(change("a") + `, ('group', 'b', 'b', 'rs', 'unknown', 'relevant', 'rescan', 'run')`)
	exec(`INSERT INTO gcos_change_feed (kind, key) VALUES ('group', 'f1'), ('state', 'f2')`)
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	exec(change("c"))
	exec(`CREATE TABLE gcos_verdict_change_later PARTITION OF gcos_verdict_change FOR VALUES FROM ('2999-01-01') TO ('3000-01-01')`)
	exec(`INSERT INTO gcos_verdict_change (changed_at, subject, key, group_key, ruleset_version, verdict_before, verdict_after, why, run_id)
		VALUES ('2999-06-01', 'group', 'd', 'd', 'rs', 'unknown', 'relevant', 'rescan', 'run')`)
	exec(`INSERT INTO gcos_change_feed (kind, key) VALUES ('group', 'f3')`)
	want := "1:a 2:b 3:c 4:d / f1 f2 f3"
	if got := rows(); got != want {
		t.Fatalf("after step 23:\n got %s\nwant %s", got, want)
	}
	var partitioned int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_partitioned_table WHERE partrelid IN ('gcos_verdict_change'::regclass, 'gcos_change_feed'::regclass)`).Scan(&partitioned); err != nil || partitioned != 2 {
		t.Fatalf("%d of the two logs partitioned after step 23 (%v)", partitioned, err)
	}
	if _, err := m.Down(ctx, m.Latest()-22); err != nil { // step 23's down (and those of the steps after it)
		t.Fatal(err)
	}
	exec(change("e"))
	if got, want := rows(), "1:a 2:b 3:c 4:d 5:e / f1 f2 f3"; got != want {
		t.Fatalf("after step 23's down:\n got %s\nwant %s", got, want)
	}
}

// TestPendingMarksCompressWithLz4: step 24 compresses new pending marks with lz4 (where the server has it), a mark
// written before the step reads back unchanged after it and after its down, and the down restores the default.
func TestPendingMarksCompressWithLz4(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := atStep(t, 23)
	methods := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(attname || '=' || coalesce(nullif(attcompression::text, ''), '-'), ' ' ORDER BY attname)
			FROM pg_attribute WHERE attrelid = 'governance_pending_mark'::regclass AND attname IN ('group_keys', 'reasons', 'marked_at', 'births')`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	// A mark large enough to be compressed: 3,000 keys, each with 25 births.
	const mark = `INSERT INTO governance_pending_mark (ruleset_version, group_keys, reasons, marked_at, births)
		SELECT $1, array_agg(md5(g::text) ORDER BY g), array_agg('handoff:object_born'::text ORDER BY g), array_agg(now() ORDER BY g),
		       array_agg((SELECT array_agg(g * 100 + i)::text FROM generate_series(1, 25) i) ORDER BY g)
		FROM generate_series(1, 3000) g`
	digest := func(ruleset string) string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT md5(group_keys::text || reasons::text || births::text) FROM governance_pending_mark WHERE ruleset_version = $1`, ruleset).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := pool.Exec(ctx, mark, "before"); err != nil {
		t.Fatal(err)
	}
	before := digest("before")
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	var lz4 bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals))`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	want := "births=l group_keys=l marked_at=l reasons=l"
	if !lz4 {
		want = "births=- group_keys=- marked_at=- reasons=-"
	}
	if got := methods(); got != want {
		t.Fatalf("after step 24 (server has lz4: %v): %s, want %s", lz4, got, want)
	}
	if _, err := pool.Exec(ctx, mark, "after"); err != nil {
		t.Fatal(err)
	}
	if lz4 {
		var method string
		if err := pool.QueryRow(ctx, `SELECT pg_column_compression(births) FROM governance_pending_mark WHERE ruleset_version = 'after'`).Scan(&method); err != nil || method != "lz4" {
			t.Fatalf("a mark written after step 24 is compressed with %q (%v), want lz4", method, err)
		}
	}
	if got := digest("before"); got != before {
		t.Fatal("a mark written before step 24 reads back changed")
	}
	after := digest("after")
	if _, err := m.Down(ctx, m.Latest()-23); err != nil {
		t.Fatal(err)
	}
	if got := methods(); got != "births=- group_keys=- marked_at=- reasons=-" {
		t.Fatalf("after step 24's down: %s, want the default everywhere", got)
	}
	if digest("before") != before || digest("after") != after {
		t.Fatal("pending marks read back changed after step 24's down")
	}
}

// TestSignalKeyGenerationsCarryTheirKeys: step 25 splits the signal keys into two generations and carries every key
// into the current one, current since the oldest key was first seen; a key claimed twice in a generation is kept
// once. Its down makes one table again, each key once, at its earliest sighting.
func TestSignalKeyGenerationsCarryTheirKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, m := atStep(t, 24)
	if _, err := pool.Exec(ctx, `INSERT INTO governance_signal_key (source_system, event_type, correlation_id, first_seen_at) VALUES
		('birth_registry', 'governance.handoff.object_born', 'a', '2026-11-01T10:17:00Z'),
		('birth_registry', 'governance.handoff.object_born', 'b', '2026-11-02T23:59:59Z'),
		('gcos', 'governance.lifecycle.run_completed', 'a', '2026-11-03T00:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	keys := func() string {
		t.Helper()
		var s string
		if err := pool.QueryRow(ctx, `SELECT string_agg(format('%s/%s/%s@%s', source_system, event_type, correlation_id,
			to_char(first_seen_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')), ' ' ORDER BY 1) FROM governance_signal_key`).Scan(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatal(err)
	}
	want := "birth_registry/governance.handoff.object_born/a@2026-11-01T10:17:00 birth_registry/governance.handoff.object_born/b@2026-11-02T23:59:59 " +
		"gcos/governance.lifecycle.run_completed/a@2026-11-03T00:00:00"
	if got := keys(); got != want {
		t.Fatalf("after step 25:\n got %s\nwant %s", got, want)
	}
	var current, inCurrent int
	var since string
	if err := pool.QueryRow(ctx, `SELECT current, to_char(since AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS'),
		(SELECT count(*) FROM governance_signal_key_g0) FROM gcos_signal_key_generation`).Scan(&current, &since, &inCurrent); err != nil {
		t.Fatal(err)
	}
	if current != 0 || since != "2026-11-01T10:17:00" || inCurrent != 3 {
		t.Fatalf("after step 25 generation %d is current since %s and holds %d keys, want 0 since 2026-11-01T10:17:00 holding 3", current, since, inCurrent)
	}
	// Two claims of one key in a generation: the primary key keeps one.
	claim := `INSERT INTO governance_signal_key (source_system, event_type, correlation_id, generation) VALUES ('gcos', 'governance.lifecycle.run_completed', 'now', 0)
		ON CONFLICT DO NOTHING`
	for range 2 {
		if _, err := pool.Exec(ctx, claim); err != nil {
			t.Fatal(err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM governance_signal_key WHERE correlation_id = 'now'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("%d rows for one key claimed twice in a generation (%v), want 1", n, err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM governance_signal_key WHERE correlation_id = 'now'`); err != nil {
		t.Fatal(err)
	}
	// A key both generations hold comes back once, at its earliest sighting.
	if _, err := pool.Exec(ctx, `INSERT INTO governance_signal_key VALUES ('birth_registry', 'governance.handoff.object_born', 'b', 1, '2026-11-04T05:00:00Z')`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Down(ctx, m.Latest()-24); err != nil {
		t.Fatal(err)
	}
	if got := keys(); got != want {
		t.Fatalf("after step 25's down:\n got %s\nwant %s", got, want)
	}
	var left int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_class WHERE relname IN ('gcos_signal_key_generation', 'governance_signal_key_g0')`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("step 25's down left %d of its tables (%v)", left, err)
	}
}
