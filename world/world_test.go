package world_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/postgres/pgtest"
	"gcos/world"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// testBirths is the size of the worlds most tests generate: big enough for every shape, small enough to be quick.
const testBirths = 50_000

// generate makes a fresh database and generates a world in it.
func generate(t *testing.T, opts world.Options) (*pgxpool.Pool, world.Summary) {
	t.Helper()
	pool := pgtest.NewDB(t)
	sum, err := world.Generate(context.Background(), pool, opts)
	if err != nil {
		t.Fatalf("Generate(%+v): %v", opts, err)
	}
	return pool, sum
}

// scalar runs a one-value query.
func scalar[T any](t *testing.T, pool *pgxpool.Pool, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// pairs runs a two-column query into a map.
func pairs[V any](t *testing.T, pool *pgxpool.Pool, sql string) map[string]V {
	t.Helper()
	rows, err := pool.Query(context.Background(), sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	defer rows.Close()
	out := map[string]V{}
	for rows.Next() {
		var k string
		var v V
		if err := rows.Scan(&k, &v); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return out
}

type check struct {
	name string
	sql  string
	want int64
}

func runChecks(t *testing.T, pool *pgxpool.Pool, checks []check) {
	t.Helper()
	for _, c := range checks {
		if got := scalar[int64](t, pool, c.sql); got != c.want {
			t.Errorf("%s: got %d, want %d\n%s", c.name, got, c.want, c.sql)
		}
	}
}

// assertWorld checks every cardinality and invariant of a world of births births (children excluded) and changes
// history rows.
func assertWorld(t *testing.T, pool *pgxpool.Pool, births, changes int64) {
	t.Helper()
	runChecks(t, pool, []check{
		// birth_registry
		{"births", `SELECT count(*) FROM birth_registry WHERE parent_code IS NULL`, births},
		{"birth collections", `SELECT count(DISTINCT collection_name) FROM birth_registry`, 78},
		{"born entity types", `SELECT count(DISTINCT entity_type) FROM birth_registry`, 169},
		{"canonical_address set", `SELECT count(*) FROM birth_registry WHERE canonical_address IS NOT NULL`, 0},
		{"births outside their type's collection", `SELECT count(*) FROM birth_registry b
			LEFT JOIN meta_catalog m USING (entity_type)
			WHERE m.registry_collection IS DISTINCT FROM b.collection_name`, 0},
		{"born_at decreasing with id", `SELECT count(*) FROM (SELECT born_at < lag(born_at) OVER (ORDER BY id) AS d
			FROM birth_registry) s WHERE d`, 0},
		{"ids 1..max", `SELECT max(id) - count(*) FROM birth_registry`, 0},
		{"births without provenance", `SELECT count(*) FROM birth_registry
			WHERE source_system IS NULL OR actor_ref IS NULL`, 0},
		{"source systems", `SELECT count(DISTINCT source_system) FROM birth_registry`, 3},
		{"statuses", `SELECT count(DISTINCT status) FROM birth_registry`, 6},
		{"bad status", `SELECT count(*) FROM birth_registry
			WHERE status NOT IN ('active','retired','superseded','merged','draft','pending')`, 0},
		{"bad entity code", `SELECT count(*) FROM birth_registry
			WHERE parent_code IS NULL AND entity_code !~ ('^' || entity_type || '-[0-9]{7,}$')`, 0},
		{"birth id sequence", `SELECT pg_sequence_last_value('birth_registry_id_seq') - max(id) FROM birth_registry`, 0},

		// meta_catalog and collection_registry
		{"entity types", `SELECT count(*) FROM meta_catalog`, 169},
		{"catalog collections", `SELECT count(DISTINCT registry_collection) FROM meta_catalog`, 78},
		{"catalog collections without births", `SELECT count(*) FROM (SELECT DISTINCT registry_collection FROM meta_catalog) m
			WHERE NOT EXISTS (SELECT 1 FROM birth_registry b WHERE b.collection_name = m.registry_collection)`, 0},
		{"collection rows", `SELECT count(*) FROM collection_registry`, 168},
		{"required", `SELECT count(*) FROM collection_registry WHERE coverage_status = 'BIRTH_REQUIRED' AND scope_class = 'IN_SCOPE'`, 74},
		{"deferred", `SELECT count(*) FROM collection_registry WHERE coverage_status = 'BIRTH_DEFERRED_NEEDS_REVIEW'`, 58},
		{"deferred user excluded", `SELECT count(*) FROM collection_registry WHERE coverage_status = 'BIRTH_DEFERRED_NEEDS_REVIEW' AND scope_class = 'USER_EXCLUDED'`, 31},
		{"deferred future", `SELECT count(*) FROM collection_registry WHERE coverage_status = 'BIRTH_DEFERRED_NEEDS_REVIEW' AND scope_class = 'FUTURE_SCOPE'`, 17},
		{"deferred orphan", `SELECT count(*) FROM collection_registry WHERE coverage_status = 'BIRTH_DEFERRED_NEEDS_REVIEW' AND scope_class = 'ORPHAN_REGISTRY'`, 7},
		{"deferred in scope", `SELECT count(*) FROM collection_registry WHERE coverage_status = 'BIRTH_DEFERRED_NEEDS_REVIEW' AND scope_class = 'IN_SCOPE'`, 3},
		{"exempt", `SELECT count(*) FROM collection_registry WHERE coverage_status LIKE 'BIRTH\_EXEMPT\_%' AND scope_class = 'IN_SCOPE'`, 36},
		{"exempt suffixes", `SELECT count(DISTINCT coverage_status) FROM collection_registry WHERE coverage_status LIKE 'BIRTH\_EXEMPT\_%'`, 3},
		{"exempt split", `SELECT count(*) FROM (SELECT coverage_status, count(*) AS n FROM collection_registry
			WHERE coverage_status LIKE 'BIRTH\_EXEMPT\_%' GROUP BY 1) s WHERE n IN (20, 12, 4)`, 3},
		{"birth collections listed", `SELECT count(DISTINCT b.collection_name) FROM birth_registry b
			JOIN collection_registry c USING (collection_name)`, 77},
		{"birth collections unlisted", `SELECT count(DISTINCT b.collection_name) FROM birth_registry b
			WHERE NOT EXISTS (SELECT 1 FROM collection_registry c WHERE c.collection_name = b.collection_name)`, 1},
		{"kinds with births", `SELECT count(DISTINCT (c.coverage_status, c.scope_class)) FROM birth_registry b
			JOIN collection_registry c USING (collection_name)`, 8},
		{"listed collections without births", `SELECT count(*) FROM collection_registry c
			WHERE NOT EXISTS (SELECT 1 FROM birth_registry b WHERE b.collection_name = c.collection_name)`, 91},

		// rule, axis and law registries
		{"measurements", `SELECT count(*) FROM measurement_registry`, 142},
		{"enabled measurements", `SELECT count(*) FROM measurement_registry WHERE enabled`, 140},
		{"measurement laws", `SELECT count(DISTINCT law_code) FROM measurement_registry`, 43},
		{"measurements with unknown law", `SELECT count(*) FROM measurement_registry m
			WHERE NOT EXISTS (SELECT 1 FROM law_jurisdiction l WHERE l.law_code = m.law_code)`, 0},
		{"bad severity", `SELECT count(*) FROM measurement_registry WHERE severity NOT IN ('low','medium','high')`, 0},
		{"laws", `SELECT count(*) FROM law_jurisdiction`, 43},
		{"law scopes unknown", `SELECT count(*) FROM law_jurisdiction l
			WHERE NOT EXISTS (SELECT 1 FROM governance_responsibility_scope s WHERE s.scope_code = l.scope_code)`, 0},
		{"laws selecting a class", `SELECT count(*) FROM law_jurisdiction l JOIN meta_catalog m USING (entity_type)
			WHERE l.collection_name IS NULL`, 15},
		{"laws selecting a collection", `SELECT count(*) FROM law_jurisdiction l JOIN collection_registry c USING (collection_name)
			WHERE l.entity_type IS NULL`, 14},
		{"laws selecting only a scope", `SELECT count(*) FROM law_jurisdiction WHERE entity_type IS NULL AND collection_name IS NULL`, 14},
		{"pivots", `SELECT count(*) FROM pivot_definitions`, 37},
		{"pivot classes", `SELECT count(DISTINCT p.entity_type) FROM pivot_definitions p JOIN meta_catalog USING (entity_type)`, 37},
		{"axis families", `SELECT count(DISTINCT axis_family) FROM pivot_definitions`, 8},
		{"law catalog", `SELECT count(*) FROM law_catalog`, 43},
		{"normative registry", `SELECT count(*) FROM normative_registry`, 5},
		{"governance docs", `SELECT count(*) FROM governance_docs`, 6},

		// governance registries
		{"scopes", `SELECT count(*) FROM governance_responsibility_scope
			WHERE scope_code IN ('policy','health','execution','render','approval','audit') AND default_owner_hint LIKE 'GOV-%'`, 6},
		{"coverage profiles", `SELECT count(*) FROM governance_coverage_profile JOIN meta_catalog USING (entity_type)`, 169},
		{"unknown risk", `SELECT count(*) FROM governance_coverage_profile WHERE risk_class IS NULL`, 5},
		{"risk classes", `SELECT count(DISTINCT risk_class) FROM governance_coverage_profile
			WHERE risk_class IN ('write_high','write_medium','read_descriptive')`, 3},
		{"privacy values", `SELECT count(DISTINCT privacy) FROM governance_coverage_profile
			WHERE privacy IN ('shared','private','user','session')`, 4},
		{"shared classes are most", `SELECT (count(*) FILTER (WHERE privacy = 'shared') * 2 > count(*))::int FROM governance_coverage_profile`, 1},
		{"independently authoritative", `SELECT count(*) FROM governance_coverage_profile WHERE independently_authoritative`, 5},
		{"ownership scopes unknown", `SELECT count(*) FROM governance_object_ownership o
			WHERE NOT EXISTS (SELECT 1 FROM governance_responsibility_scope s WHERE s.scope_code = o.scope_code)`, 0},
		{"inactive owners", `SELECT (count(*) FILTER (WHERE status = 'inactive') BETWEEN 1 AND count(*) / 10)::int FROM governance_object_ownership`, 1},
		{"ownership id sequence", `SELECT pg_sequence_last_value('governance_object_ownership_id_seq') - max(id) FROM governance_object_ownership`, 0},
		{"exceptions", `SELECT count(*) FROM governance_exception`, 8},
		{"approved unexpired exceptions", `SELECT count(*) FROM governance_exception
			WHERE status = 'approved' AND expires_at > '2028-01-01' AND approval_ref IS NOT NULL`, 3},
		{"object exceptions on born objects", `SELECT count(*) FROM governance_exception e
			JOIN birth_registry b USING (collection_name, entity_code)`, 2},

		// event substrate
		{"event types", `SELECT count(*) FROM event_type_registry`, 40},
		{"governance event types", `SELECT count(*) FROM event_type_registry WHERE event_domain = 'governance'`, 0},
		{"event subscriptions", `SELECT count(*) FROM event_subscription WHERE event_domain = 'iu'`, 3},
		{"heartbeats", `SELECT count(*) FROM queue_heartbeat`, 3},
		{"route cursors", `SELECT count(*) FROM iu_route_worker_cursor`, 1},
		{"untouched tables", `SELECT (SELECT count(*) FROM event_outbox) + (SELECT count(*) FROM event_pending)
			+ (SELECT count(*) FROM event_read) + (SELECT count(*) FROM system_issues)
			+ (SELECT count(*) FROM evolution_snapshots)`, 0},

		// registry_changelog
		{"changes", `SELECT count(*) FROM registry_changelog`, changes},
		{"timestamp decreasing with id", `SELECT count(*) FROM (SELECT "timestamp" < lag("timestamp") OVER (ORDER BY id) AS d
			FROM registry_changelog) s WHERE d`, 0},
		{"changes after the births' end", `SELECT count(*) FROM registry_changelog
			WHERE "timestamp" >= (SELECT max(born_at) AT TIME ZONE 'UTC' + interval '1 day' FROM birth_registry WHERE parent_code IS NULL)`, 0},
		{"object changes about unborn objects", `SELECT count(*) FROM registry_changelog c
			JOIN meta_catalog m USING (entity_type)
			LEFT JOIN birth_registry b ON b.collection_name = m.registry_collection AND b.entity_code = c.entity_code
			WHERE b.id IS NULL OR b.born_at AT TIME ZONE 'UTC' > c."timestamp"`, 0},
		{"unknown change subjects", `SELECT count(*) FROM registry_changelog
			WHERE entity_type NOT IN (SELECT entity_type FROM meta_catalog)
			  AND entity_type NOT IN ('collection','source','pivot','law_jurisdiction','measurement','ownership','exception')`, 0},
		{"unknown actions", `SELECT count(*) FROM registry_changelog WHERE action NOT IN ('create','update','register','retire',
			'supersede','merge','count_changed','source_changed','owner_changed','approval_changed','exception_changed',
			'axis_introduced','policy_changed')`, 0},
		{"unknown alert levels", `SELECT count(*) FROM registry_changelog WHERE alert_level NOT IN ('info','warning','critical')`, 0},
		{"incomplete changes", `SELECT count(*) FROM registry_changelog
			WHERE entity_code IS NULL OR changed_by IS NULL OR alert_detail IS NULL`, 0},
	})
	if changes > 0 {
		runChecks(t, pool, []check{
			{"changelog id sequence", `SELECT pg_sequence_last_value('registry_changelog_id_seq') - max(id) FROM registry_changelog`, 0},
		})
	}
}

func TestGenerate_Cardinalities(t *testing.T) {
	t.Parallel()
	var progress bytes.Buffer
	pool, sum := generate(t, world.Options{Births: testBirths, Seed: 7, Progress: &progress})
	assertWorld(t, pool, testBirths, world.DefaultChanges)

	// The status mix is mostly active with a realistic share of the others.
	st := pairs[int64](t, pool, `SELECT status, count(*) FROM birth_registry GROUP BY 1`)
	if active := float64(st["active"]) / testBirths; active < 0.85 || active > 0.92 {
		t.Errorf("active share %.3f, want about 0.887", active)
	}
	for _, s := range []string{"retired", "superseded", "merged", "draft", "pending"} {
		if st[s] < testBirths/500 {
			t.Errorf("status %s: only %d births", s, st[s])
		}
	}
	// Skewed sizes: the largest collection holds far more than the median one.
	sizes := pairs[int64](t, pool, `SELECT collection_name, count(*) FROM birth_registry GROUP BY 1`)
	if got := sizes["commerce_orders"]; got < testBirths/5 {
		t.Errorf("largest collection holds %d births, want over a fifth", got)
	}

	// The summary agrees with the database.
	if diff := cmp.Diff(st, sum.Statuses); diff != "" {
		t.Errorf("Summary.Statuses (-db +summary):\n%s", diff)
	}
	got := map[string]int64{}
	unlisted := 0
	for _, c := range sum.Collections {
		got[c.Collection] = c.Births
		if c.CoverageStatus == "" {
			unlisted++
		}
	}
	if diff := cmp.Diff(sizes, got); diff != "" {
		t.Errorf("Summary.Collections (-db +summary):\n%s", diff)
	}
	if unlisted != 1 || len(sum.Collections) != 78 {
		t.Errorf("Summary: %d collections, %d unlisted; want 78 and 1", len(sum.Collections), unlisted)
	}
	for table, n := range sum.Tables {
		if db := scalar[int64](t, pool, fmt.Sprintf("SELECT count(*) FROM %s", table)); db != n {
			t.Errorf("Summary.Tables[%s] = %d, database has %d", table, n, db)
		}
	}
	if sum.Births != testBirths || sum.Elapsed <= 0 || sum.RowsPerSecond <= 0 || sum.Container != nil {
		t.Errorf("Summary: %+v", sum)
	}
	if !strings.Contains(progress.String(), "births") {
		t.Errorf("no progress lines on a non-terminal writer: %q", progress.String())
	}

	// A second generation is refused and changes nothing.
	_, err := world.Generate(context.Background(), pool, world.Options{Births: testBirths, Seed: 7})
	if !errors.Is(err, world.ErrNotEmpty) || !strings.Contains(err.Error(), "birth_registry") {
		t.Fatalf("second Generate: %v, want ErrNotEmpty naming birth_registry", err)
	}
	assertWorld(t, pool, testBirths, world.DefaultChanges)
}

func TestGenerate_RefusesNonEmptyRegistry(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	if _, err := pool.Exec(context.Background(),
		`INSERT INTO collection_registry VALUES ('x', 'BIRTH_REQUIRED', 'IN_SCOPE')`); err != nil {
		t.Fatal(err)
	}
	_, err := world.Generate(context.Background(), pool, world.Options{Births: 1000})
	if !errors.Is(err, world.ErrNotEmpty) || !strings.Contains(err.Error(), "collection_registry") {
		t.Fatalf("Generate over a non-empty collection_registry: %v", err)
	}
	if n := scalar[int64](t, pool, `SELECT count(*) FROM birth_registry`); n != 0 {
		t.Fatalf("%d births written by a refused Generate", n)
	}
}

// fingerprints returns an md5 over the ordered rows of every table Generate fills.
func fingerprints(t *testing.T, pool *pgxpool.Pool) map[string]string {
	t.Helper()
	order := map[string]string{
		"birth_registry": "id", "registry_changelog": "id", "collection_registry": "collection_name",
		"meta_catalog": "entity_type", "measurement_registry": "measurement_id", "pivot_definitions": "pivot_code",
		"law_jurisdiction": "law_code", "normative_registry": "norm_code", "law_catalog": "law_code",
		"governance_docs": "doc_code", "governance_responsibility_scope": "scope_code",
		"governance_coverage_profile": "entity_type", "governance_object_ownership": "id",
		"governance_exception": "exception_id", "event_type_registry": "event_domain, event_type",
		"event_subscription": "id", "queue_heartbeat": "executor_name", "iu_route_worker_cursor": "worker_name",
	}
	out := map[string]string{}
	for table, by := range order {
		out[table] = scalar[string](t, pool,
			fmt.Sprintf("SELECT coalesce(md5(string_agg(t::text, E'\\n' ORDER BY %s)), '') FROM %s t", by, table))
	}
	return out
}

func TestGenerate_Deterministic(t *testing.T) {
	t.Parallel()
	opts := func(seed uint64) world.Options {
		return world.Options{Births: 20_000, Changes: 5_000, Children: 1_000, Seed: seed}
	}
	type gen struct {
		fp  map[string]string
		sum world.Summary
	}
	gens := make([]gen, 3)
	t.Run("generate", func(t *testing.T) {
		for i, seed := range []uint64{42, 42, 43} {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				pool, sum := generate(t, opts(seed))
				gens[i] = gen{fingerprints(t, pool), sum}
			})
		}
	})
	if t.Failed() {
		return
	}
	if diff := cmp.Diff(gens[0].fp, gens[1].fp); diff != "" {
		t.Errorf("same seed, different rows (-first +second):\n%s", diff)
	}
	ignore := cmpopts.IgnoreFields(world.Summary{}, "Elapsed", "RowsPerSecond")
	if diff := cmp.Diff(gens[0].sum, gens[1].sum, ignore); diff != "" {
		t.Errorf("same seed, different summaries (-first +second):\n%s", diff)
	}
	// Another seed changes the row-level content; the registries are fixed.
	for _, table := range []string{"birth_registry", "registry_changelog"} {
		if gens[0].fp[table] == gens[2].fp[table] {
			t.Errorf("seeds 42 and 43 give the same %s", table)
		}
	}
	for _, table := range []string{"collection_registry", "meta_catalog", "measurement_registry", "law_jurisdiction"} {
		if gens[0].fp[table] != gens[2].fp[table] {
			t.Errorf("seeds 42 and 43 give different %s; registries are fixed", table)
		}
	}
}

func TestAddChildren(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := generate(t, world.Options{Births: 5_000, Changes: 500, Seed: 3})
	maxID := scalar[int64](t, pool, `SELECT max(id) FROM birth_registry`)
	maxBorn := scalar[time.Time](t, pool, `SELECT max(born_at) FROM birth_registry`)

	const n = 20_000
	cont, err := world.AddChildren(ctx, pool, n, 9)
	if err != nil {
		t.Fatal(err)
	}
	if cont.String() != cont.Collection+":"+cont.EntityCode {
		t.Errorf("Ref.String() = %q", cont.String())
	}
	runChecks(t, pool, []check{
		{"children", `SELECT count(*) FROM birth_registry WHERE parent_code IS NOT NULL`, n},
		{"children of the container", fmt.Sprintf(`SELECT count(*) FROM birth_registry
			WHERE parent_code = '%s' AND collection_name = '%s' AND entity_type = '%s'`,
			cont.EntityCode, cont.Collection, cont.EntityType), n},
		{"container", fmt.Sprintf(`SELECT count(*) FROM birth_registry b JOIN collection_registry c USING (collection_name)
			WHERE b.id = %d AND b.entity_code = '%s' AND b.parent_code IS NULL AND b.status = 'active'
			  AND c.coverage_status = 'BIRTH_REQUIRED' AND c.scope_class = 'IN_SCOPE'`, cont.ID, cont.EntityCode), 1},
		{"children ids", fmt.Sprintf(`SELECT count(*) FROM birth_registry WHERE parent_code IS NOT NULL AND id > %d`, maxID), n},
		{"children born after the world", fmt.Sprintf(`SELECT count(*) FROM birth_registry
			WHERE parent_code IS NOT NULL AND born_at > '%s'`, maxBorn.Format(time.RFC3339Nano)), n},
		{"born_at decreasing with id", `SELECT count(*) FROM (SELECT born_at < lag(born_at) OVER (ORDER BY id) AS d
			FROM birth_registry) s WHERE d`, 0},
		{"birth id sequence", `SELECT pg_sequence_last_value('birth_registry_id_seq') - max(id) FROM birth_registry`, 0},
	})

	// The same seed finds the same container again; the new children get new codes.
	again, err := world.AddChildren(ctx, pool, 10, 9)
	if err != nil {
		t.Fatal(err)
	}
	if again != cont {
		t.Errorf("second AddChildren chose %v, first %v", again, cont)
	}
	if got := scalar[int64](t, pool, `SELECT count(*) FROM birth_registry WHERE parent_code = $1`, cont.EntityCode); got != n+10 {
		t.Errorf("%d children after two calls, want %d", got, n+10)
	}
	// An ordinary insert continues after the children.
	if _, err := pool.Exec(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status)
		VALUES ('x-1', 'commerce_orders', 'order', 'active')`); err != nil {
		t.Fatalf("insert after AddChildren: %v", err)
	}
	if _, err := world.AddChildren(ctx, pool, 0, 1); err == nil {
		t.Error("AddChildren(0): no error")
	}
}

func TestGenerate_WithChildren(t *testing.T) {
	t.Parallel()
	pool, sum := generate(t, world.Options{Births: 2_000, Changes: 100, Children: 3_000, Seed: 5})
	if sum.Container == nil || sum.Children != 3_000 || sum.Births != 5_000 {
		t.Fatalf("Summary: container %v, %d children, %d births", sum.Container, sum.Children, sum.Births)
	}
	if got := scalar[int64](t, pool, `SELECT count(*) FROM birth_registry WHERE parent_code = $1 AND collection_name = $2`,
		sum.Container.EntityCode, sum.Container.Collection); got != 3_000 {
		t.Fatalf("%d children under %v, want 3000", got, sum.Container)
	}
	assertWorld(t, pool, 2_000, 100)
}

func TestAddChildren_BearsContainer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO collection_registry VALUES ('a_required', 'BIRTH_REQUIRED', 'IN_SCOPE'),
		                                       ('b_exempt', 'BIRTH_EXEMPT_SYSTEM', 'IN_SCOPE');
		INSERT INTO meta_catalog VALUES ('thing', 'a_required'), ('sys_thing', 'b_exempt')`); err != nil {
		t.Fatal(err)
	}
	cont, err := world.AddChildren(ctx, pool, 100, 1)
	if err != nil {
		t.Fatal(err)
	}
	if cont.Collection != "a_required" || cont.EntityType != "thing" || cont.ID != 1 {
		t.Fatalf("container %+v", cont)
	}
	runChecks(t, pool, []check{
		{"rows", `SELECT count(*) FROM birth_registry`, 101},
		{"children", `SELECT count(*) FROM birth_registry WHERE parent_code = 'thing-container-1'`, 100},
	})

	if _, err := world.AddChildren(ctx, pgtest.NewDB(t), 10, 1); err == nil ||
		!strings.Contains(err.Error(), "BIRTH_REQUIRED") {
		t.Fatalf("AddChildren on an empty database: %v", err)
	}
}

func TestChurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := generate(t, world.Options{Births: 5_000, Changes: 500, Seed: 11})
	dbNow := scalar[time.Time](t, pool, `SELECT now()`)

	runCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	churn := &world.Churn{Pool: pool, BirthsPerSecond: 400, ChangesPerSecond: 100, Seed: 2}
	done := make(chan error, 1)
	go func() { done <- churn.Run(runCtx) }()
	// Children under concurrent churn: ids and codes must not collide.
	if _, err := world.AddChildren(ctx, pool, 5_000, 4); err != nil {
		t.Fatalf("AddChildren during churn: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	births, changes := churn.Births(), churn.Changes()
	if births < 100 || births > 900 || changes < 20 || changes > 250 {
		t.Errorf("churn wrote %d births and %d changes in 2 s at 400/s and 100/s", births, changes)
	}
	// A batch whose commit is cut by the deadline may commit while Run reports an error, so the counters are
	// lower bounds; the rows themselves are the truth every other check is held to.
	stored := scalar[int64](t, pool, `SELECT count(*) FROM birth_registry WHERE entity_code ~ '-r[0-9]+$'`)
	if stored < births {
		t.Errorf("churn counted %d births but stored %d", births, stored)
	}
	storedChanges := scalar[int64](t, pool, fmt.Sprintf(`SELECT count(*) FROM registry_changelog WHERE "timestamp" >= '%s'`,
		dbNow.UTC().Format("2006-01-02 15:04:05.999999")))
	if storedChanges < changes {
		t.Errorf("churn counted %d changes but stored %d", changes, storedChanges)
	}
	births, changes = stored, storedChanges
	runChecks(t, pool, []check{
		{"churn births", `SELECT count(*) FROM birth_registry WHERE entity_code ~ '-r[0-9]+$'`, births},
		{"churn births by the database clock", fmt.Sprintf(`SELECT count(*) FROM birth_registry
			WHERE entity_code ~ '-r[0-9]+$' AND born_at >= '%s' AND entity_code = entity_type || '-r' || id
			  AND canonical_address IS NULL AND parent_code IS NULL`, dbNow.Format(time.RFC3339Nano)), births},
		{"churn births in their type's collection", `SELECT count(*) FROM birth_registry b JOIN meta_catalog m
			ON m.entity_type = b.entity_type AND m.registry_collection = b.collection_name
			WHERE b.entity_code ~ '-r[0-9]+$'`, births},
		{"churn changes", fmt.Sprintf(`SELECT count(*) FROM registry_changelog WHERE "timestamp" >= '%s'`,
			dbNow.UTC().Format("2006-01-02 15:04:05.999999")), changes},
		{"birth id sequence", `SELECT pg_sequence_last_value('birth_registry_id_seq') - max(id) FROM birth_registry`, 0},
	})
	if !regexp.MustCompile(`^[a-z_]+$`).MatchString(scalar[string](t, pool,
		`SELECT entity_type FROM registry_changelog ORDER BY id DESC LIMIT 1`)) {
		t.Error("odd entity_type in a churn change")
	}

	// Bad configurations are refused.
	if err := (&world.Churn{Pool: pool, BirthsPerSecond: -1}).Run(ctx); err == nil {
		t.Error("negative rate: no error")
	}
	if err := (&world.Churn{}).Run(ctx); err == nil {
		t.Error("no pool: no error")
	}
}

// TestGenerate_Full generates the live-sized world. It takes a while, so it runs only with GCOS_WORLD_FULL=1.
func TestGenerate_Full(t *testing.T) {
	if os.Getenv("GCOS_WORLD_FULL") != "1" {
		t.Skip("set GCOS_WORLD_FULL=1 to generate the live-sized world (1,037,724 births)")
	}
	pool, sum := generate(t, world.Options{})
	t.Logf("%s", sum)
	if sum.Births != world.DefaultBirths {
		t.Fatalf("%d births, want %d", sum.Births, world.DefaultBirths)
	}
	if sum.Elapsed > 15*time.Second {
		t.Logf("WARNING: generation took %s, over the 15 s target", sum.Elapsed)
	}
	assertWorld(t, pool, world.DefaultBirths, world.DefaultChanges)
}
