package intake_test

// Doc 41 §41.11 acceptance tests not covered in events/emit_test.go / tail_test.go: Birth untouched (3), no lost handoff
// (4), silent gap (6), and the replay clause of §41.7 / SPEC §9.3 ("dirty marks are idempotent and consumers that
// already saw a signal are not re-notified").

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/daemon"
	"gcos/events"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/postgres/substrate"
	"gcos/scan"
	"gcos/world"
)

// sb11SchemaSQL describes the substrate tables as the catalog holds them: columns (type, nullability, default),
// constraints, indexes, triggers, rules and row-security policies. $1 lists the tables.
const sb11SchemaSQL = `
SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod) || ' ' ||
       a.attnotnull::text || ' ' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
WHERE c.oid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
UNION ALL
SELECT 'constraint ' || c.relname || ' ' || k.conname || ' ' || pg_get_constraintdef(k.oid)
FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid
WHERE c.oid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid)
FROM pg_index i WHERE i.indrelid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
UNION ALL
SELECT 'trigger ' || pg_get_triggerdef(g.oid)
FROM pg_trigger g WHERE g.tgrelid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)
UNION ALL
SELECT 'rule ' || r.definition FROM pg_rules r WHERE r.tablename = ANY ($1::text[])
UNION ALL
SELECT 'policy ' || p.tablename || ' ' || p.policyname FROM pg_policies p WHERE p.tablename = ANY ($1::text[])
UNION ALL
SELECT 'table ' || c.relname || ' ' || c.relkind::text || ' ' || c.relrowsecurity::text || ' ' || coalesce(array_to_string(c.reloptions, ','), '')
FROM pg_class c WHERE c.oid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)`

// TestSB11_BirthUntouched (doc 41 §41.11.3, doc 32 §4): the whole loop — backfill, activation, event registration,
// the intake worker with its monitor, the scan scheduler, the full audit and promotion — runs over a world the
// organisation's writers keep changing (churn), and afterwards birth_registry, registry_changelog and every registry
// GCOS reads have the same schema, no trigger and byte-identical pre-existing rows. The only rows added to
// birth_registry are the churn's; the only rows added to registry_changelog besides the churn's are GCOS's own
// audit rows, each with changed_by 'gcos:…' and entity_type 'governance_…'.
func TestSB11_BirthUntouched(t *testing.T) {
	t.Parallel()
	b := gcostest.New(t, gcostest.Options{Births: 800, Changes: 100, Seed: 5, Config: func(cfg *gcos.Config) {
		cfg.Intake.PageSize = 200
		cfg.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
		cfg.Intake.HorizonGuard = gcos.Duration(hoGuard)
		cfg.Intake.HeartbeatInterval = gcos.Duration(100 * time.Millisecond)
		cfg.Intake.SilentGapThreshold = gcos.Duration(time.Second)
		cfg.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.IncrementalInterval = gcos.Duration(200 * time.Millisecond)
	}})
	ctx, pool, cfg := b.Ctx, b.Pool, b.Cfg

	var tables []string
	for _, tb := range substrate.Tables {
		tables = append(tables, tb.Name)
	}
	schema := func() string {
		t.Helper()
		rows, err := pool.Query(ctx, sb11SchemaSQL, tables)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(lines)
		return strings.Join(lines, "\n")
	}
	noTriggers := func(when string) {
		t.Helper()
		if n := b.Count(t, `SELECT count(*) FROM pg_trigger WHERE tgrelid = ANY (SELECT to_regclass(t) FROM unnest($1::text[]) t)`, tables); n != 0 {
			t.Fatalf("%s: %d triggers on substrate tables", when, n)
		}
	}
	var maxBirth, maxChange int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT max(id) FROM birth_registry), (SELECT max(id) FROM registry_changelog)`).Scan(&maxBirth, &maxChange); err != nil {
		t.Fatal(err)
	}
	// Rows GCOS must never touch: the births and changes so far, every registry it reads, and the rows of the
	// shared substrate tables that are not its own.
	untouched := map[string]string{
		"birth_registry":                      `SELECT * FROM birth_registry WHERE id <= ` + fmt.Sprint(maxBirth),
		"registry_changelog":                  `SELECT * FROM registry_changelog WHERE id <= ` + fmt.Sprint(maxChange),
		"event_type_registry (other domains)": `SELECT * FROM event_type_registry WHERE event_domain <> 'governance'`,
		"queue_heartbeat (other executors)":   `SELECT * FROM queue_heartbeat WHERE executor_name NOT LIKE 'gcos.%'`,
	}
	for _, name := range []string{"collection_registry", "meta_catalog", "measurement_registry", "pivot_definitions",
		"law_jurisdiction", "normative_registry", "law_catalog", "governance_docs", "governance_coverage_profile",
		"governance_responsibility_scope", "governance_object_ownership", "governance_exception", "iu_route_worker_cursor",
		"event_subscription"} {
		untouched[name] = `SELECT * FROM ` + pgx.Identifier{name}.Sanitize()
	}
	digests := map[string]string{}
	for name, q := range untouched {
		digests[name] = b.Digest(t, q)
	}
	schemaBefore := schema()
	noTriggers("before")

	res := b.Backfill(t)
	b.Activate(t, res.RulesetVersion)
	e := &hoEnv{World: b, stage: intake.New(b.Store)}
	e.w = &intake.Worker{Stage: e.stage, Config: cfg.Intake, DisableMonitor: true, Apply: e.apply}
	e.activateTypes(t, "governance.")
	// The daemon's intake and event-driven and incremental scans run while the churn writes.
	d, err := daemon.New(daemon.Config{Store: b.Store, ScanModes: []string{postgres.ModeEvent, postgres.ModeIncremental}, NoPromotion: true})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	runErr := make(chan error, 1)
	go func() { runErr <- d.Run(runCtx) }()
	churn := &world.Churn{Pool: pool, BirthsPerSecond: 400, ChangesPerSecond: 80, Seed: 9}
	churnCtx, stopChurn := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer stopChurn()
	if err := churn.Run(churnCtx); err != nil {
		t.Fatal(err)
	}
	wait.Pass(ctx, 300*time.Millisecond) // the daemon goes on ticking a little after the churn
	stop()
	if err := <-runErr; err != nil {
		t.Fatal(err)
	}
	if churn.Births() == 0 || churn.Changes() == 0 {
		t.Fatalf("churn wrote %d births and %d changes: nothing moved", churn.Births(), churn.Changes())
	}
	e.catchUp(t)
	b.ScanAll(t, postgres.ModeIncremental)
	if _, err := scan.New(b.Store).FullAudit(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := events.New(b.Store).PromotePending(ctx); err != nil {
		t.Fatal(err)
	}
	e.catchUp(t) // the audit's own rows come back through the tail, and are skipped

	if got := schema(); got != schemaBefore {
		t.Fatalf("substrate schema changed:\nbefore:\n%s\nafter:\n%s", schemaBefore, got)
	}
	noTriggers("after")
	for name, q := range untouched {
		if got := b.Digest(t, q); got != digests[name] {
			t.Errorf("%s: pre-existing rows changed", name)
		}
	}
	if n := b.Count(t, `SELECT count(*) FROM birth_registry WHERE id > $1`, maxBirth); n != churn.Births() {
		t.Fatalf("%d births added, the churn wrote %d: GCOS wrote birth_registry", n, churn.Births())
	}
	var other, own, ownOff int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE coalesce(changed_by, '') NOT LIKE 'gcos:%'),
		count(*) FILTER (WHERE changed_by LIKE 'gcos:%'),
		count(*) FILTER (WHERE changed_by LIKE 'gcos:%' AND entity_type NOT LIKE 'governance\_%')
		FROM registry_changelog WHERE id > $1`, maxChange).Scan(&other, &own, &ownOff); err != nil {
		t.Fatal(err)
	}
	if other != churn.Changes() || own == 0 || ownOff != 0 {
		t.Fatalf("registry_changelog additions: %d not GCOS's (the churn wrote %d), %d GCOS audit rows, %d of them "+
			"outside governance_*", other, churn.Changes(), own, ownOff)
	}
	// The loop did run: the churn's births were handed off and scanned (those before the backfill are in its seed).
	if c, err := intake.New(b.Store).GetCursor(ctx, "birth_registry"); err != nil || c.EventsSeen != b.Count(t, `SELECT count(*) FROM birth_registry WHERE id > $1`, maxBirth) {
		t.Fatalf("birth cursor %+v (%v): not every birth was handed off", c, err)
	}
	t.Logf("churn: %d births, %d changes; GCOS audit rows: %d", churn.Births(), churn.Changes(), own)
}

// TestSB11_NoLostHandoff (doc 41 §41.11.4, SPEC §14): real intake workers with the handoff apply step tail a world
// while concurrent writers commit births (some of them inherited children) and changes out of order. The workers are
// killed at random points at least 20 times — a deadline anywhere, the backend terminated inside apply, the context
// cancelled after apply — and resumed, sometimes two at once. A poison row in the change ledger is dead-lettered and
// visible while intake continues. In the end every committed row was read exactly once by a committed poll, every
// committed birth's group is recorded in every scope and marked (or, new, waiting to be seeded), nothing else is
// dirty, and no signal key was emitted twice.
func TestSB11_NoLostHandoff(t *testing.T) {
	t.Parallel()
	const bucket = 400
	setupStart := time.Now()
	e := newHandoffEnv(t, 800, func(c *gcos.Config) { c.Intake.SignalBucket = bucket })
	t.Logf("setup %s", time.Since(setupStart))
	ctx := e.Ctx
	var maxBirth int64
	if err := e.Pool.QueryRow(ctx, `SELECT max(id) FROM birth_registry`).Scan(&maxBirth); err != nil {
		t.Fatal(err)
	}
	type class struct{ typ, coll string }
	rows, err := e.Pool.Query(ctx, `SELECT entity_type, registry_collection FROM meta_catalog ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	classes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (class, error) {
		var c class
		return c, r.Scan(&c.typ, &c.coll)
	})
	if err != nil {
		t.Fatal(err)
	}
	type parent struct{ typ, coll, code string }
	rows, err = e.Pool.Query(ctx, `SELECT entity_type, collection_name, entity_code FROM birth_registry
		WHERE parent_code IS NULL ORDER BY id LIMIT 40`)
	if err != nil {
		t.Fatal(err)
	}
	parents, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (parent, error) {
		var p parent
		return p, r.Scan(&p.typ, &p.coll, &p.code)
	})
	if err != nil {
		t.Fatal(err)
	}
	changed := []string{classes[3].coll, classes[40].coll, classes[90].coll} // collections the change writer updates

	pcfg, err := pgxpool.ParseConfig(pgtest.DSN(e.Pool))
	if err != nil {
		t.Fatal(err)
	}
	pcfg.MaxConns = 6
	writers, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer writers.Close()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var poison atomic.Int64
	writerErrs := make(chan error, 8)
	for wi := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(wi), 11))
			// The writers commit at a steady pace (about 150 births/s in all), so the backlog the intake resumes
			// from stays bounded however slow the machine is; the poison row is committed early, among the others.
			for n := 0; ; n++ {
				select {
				case <-stop:
					return
				case <-time.After(time.Duration(10+r.IntN(30)) * time.Millisecond):
				}
				var poisonID int64
				err := pgx.BeginFunc(ctx, writers, func(tx pgx.Tx) error {
					if r.IntN(2) == 0 {
						if _, err := tx.Exec(ctx, `SELECT now()`); err != nil { // the timestamp is taken early
							return err
						}
					}
					wait.Pace(ctx, time.Duration(r.IntN(8))*time.Millisecond) // a writer holds its transaction open
					for range 1 + r.IntN(3) {
						src := []string{"birth-api", "registry-sync"}[r.IntN(2)]
						if r.IntN(6) == 0 {
							p := parents[r.IntN(len(parents))]
							if _, err := tx.Exec(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status,
								parent_code, source_system, actor_ref) VALUES ($1 || '-k' || gen_random_uuid(), $2, $3, 'pending', $1, $4, 'writer')`,
								p.code, p.coll, p.typ, src); err != nil {
								return err
							}
							continue
						}
						c := classes[r.IntN(len(classes))]
						if _, err := tx.Exec(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status,
							source_system, actor_ref) VALUES ($1 || '-w' || gen_random_uuid(), $2, $1, $3, $4, 'writer')`,
							c.typ, c.coll, []string{"active", "active", "draft", "pending"}[r.IntN(4)], src); err != nil {
							return err
						}
					}
					if wi == 0 && n%4 == 0 {
						if _, err := tx.Exec(ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
							VALUES ('collection', $1, 'update', 'ops:writer')`, changed[r.IntN(len(changed))]); err != nil {
							return err
						}
					}
					if wi == 1 && n >= 20 && poison.Load() == 0 {
						if err := tx.QueryRow(ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by)
							VALUES ('mystery_registry', 'M-1', 'update', 'ops:poison') RETURNING id`).Scan(&poisonID); err != nil {
							return err
						}
					}
					wait.Pace(ctx, time.Duration(r.IntN(8))*time.Millisecond) // a writer holds its transaction open
					if r.IntN(10) == 0 {
						return errRollback
					}
					return nil
				})
				switch {
				case err == nil && poisonID != 0:
					poison.Store(poisonID)
				case err != nil && !errors.Is(err, errRollback):
					writerErrs <- err
					return
				}
			}
		}()
	}

	killer, err := pgx.Connect(ctx, pgtest.DSN(e.Pool))
	if err != nil {
		t.Fatal(err)
	}
	defer killer.Close(context.Background())
	var killerMu sync.Mutex
	var terminated, cancelled, deadlines atomic.Int64
	kills := func() int64 { return terminated.Load() + cancelled.Load() + deadlines.Load() }
	cfg := e.Cfg.Intake
	cfg.PageSize, cfg.CatchUpPageSize = 40, 0 // small pages, read ahead too: many polls, many points to be killed at
	killStart := time.Now()
	enough := func() bool { return kills() >= 21 && terminated.Load() >= 4 && cancelled.Load() >= 4 }
	for round := 0; !enough() && round < 300; round++ {
		// Mode 0 stops the workers at a random instant (start-up, a poll, a retry, the heartbeat); modes 1 and 2
		// kill the first poll that applies rows, right after apply wrote its dirty marks and signals and before
		// the cursor advance commits with them.
		mode := round % 3
		timeout := time.Duration(40+rand.IntN(200)) * time.Millisecond
		if mode != 0 {
			timeout = 600 * time.Millisecond
		}
		runCtx, cancel := context.WithTimeout(ctx, timeout)
		var fired atomic.Bool
		apply := func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
			failures, _, err := intake.New(e.Store).ApplyHandoff(ctx, tx, rows)
			if err != nil || len(rows) == 0 || mode == 0 || !fired.CompareAndSwap(false, true) {
				return failures, err
			}
			if mode == 1 { // the backend is terminated; the worker reconnects and resumes in the same Run
				var pid int32
				if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
					return nil, err
				}
				killerMu.Lock()
				_, err := killer.Exec(context.Background(), `SELECT pg_terminate_backend($1)`, pid)
				killerMu.Unlock()
				if err != nil {
					return nil, err
				}
				terminated.Add(1)
				time.AfterFunc(100*time.Millisecond, cancel) // time to reconnect and poll again, then stop
				return failures, nil
			}
			cancel() // the process is stopped
			cancelled.Add(1)
			return nil, ctx.Err()
		}
		n := 1 + rand.IntN(2)
		done := make(chan error, n)
		for range n {
			go func() {
				w := &intake.Worker{Stage: intake.New(e.Store), Config: cfg, DisableMonitor: true, Apply: apply}
				done <- w.Run(runCtx)
			}()
		}
		for range n {
			if err := <-done; err != nil {
				t.Fatalf("Run: %v", err)
			}
		}
		if mode == 0 && errors.Is(runCtx.Err(), context.DeadlineExceeded) {
			deadlines.Add(1)
		}
		cancel()
	}
	t.Logf("kill phase %s", time.Since(killStart))
	close(stop)
	wg.Wait()
	close(writerErrs)
	for err := range writerErrs {
		t.Fatalf("writer: %v", err)
	}
	if !enough() {
		t.Fatalf("only %d kills (terminated %d, cancelled %d, deadlines %d)", kills(), terminated.Load(), cancelled.Load(), deadlines.Load())
	}
	if poison.Load() == 0 {
		t.Fatal("the poison row was never committed")
	}

	// Resume: catch up (a killed worker's transaction may linger a moment and hold the horizon), and let the
	// poison row run out of attempts.
	births := e.Count(t, `SELECT count(*) FROM birth_registry`)
	resumeStart := time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for {
		e.catchUp(t)
		bc, err1 := intake.New(e.Store).GetCursor(ctx, "birth_registry")
		cc, err2 := intake.New(e.Store).GetCursor(ctx, "registry_changelog")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		dead := e.Count(t, `SELECT count(*) FROM event_pending WHERE entity_ref = ($1::bigint)::text AND dead_lettered_at IS NOT NULL`, poison.Load())
		changes := e.Count(t, `SELECT count(*) FROM registry_changelog`)
		if bc.EventsSeen == births && cc.EventsSeen == changes && dead == 1 {
			break
		}
		if bc.EventsSeen > births || cc.EventsSeen > changes {
			t.Fatalf("rows read twice: births %d/%d, changes %d/%d", bc.EventsSeen, births, cc.EventsSeen, changes)
		}
		if time.Now().After(deadline) {
			var pending string
			_ = e.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(row_to_json(p)::text, '; '), 'none') FROM event_pending p
				WHERE entity_ref = ($1::bigint)::text`, poison.Load()).Scan(&pending)
			t.Fatalf("never caught up: births %d/%d, changes %d/%d, poison %d dead-lettered %d (retry lane: %s)", bc.EventsSeen,
				births, cc.EventsSeen, changes, poison.Load(), dead, pending)
		}
		wait.Pace(ctx, 50*time.Millisecond) // the intake's poll interval
	}
	if open, err := gcostest.FindingOpen(ctx, e.Pool, gcos.IssueHandoffDLQ); err != nil || !open {
		t.Fatalf("handoff_dlq open = %v (%v)", open, err)
	}
	t.Logf("resumed and caught up in %s", time.Since(resumeStart))

	// Every committed birth's group, in every scope, is recorded and marked (or, new, waiting to be seeded).
	newBirths := e.Count(t, `SELECT count(*) FROM birth_registry WHERE id > $1`, maxBirth)
	bases := e.Count(t, hoBases+`SELECT count(DISTINCT (x.c, x.k, x.s)) FROM x WHERE x.id > $1`, maxBirth)
	scopes := e.Count(t, `SELECT count(*) FROM governance_responsibility_scope`)
	born := e.groupsOfBirths(t, `x.id > $1`, maxBirth)
	if newBirths < 100 || int64(len(born)) != bases*scopes {
		t.Fatalf("%d new births in %d base groups: %d groups recorded, want %d", newBirths, bases, len(born), bases*scopes)
	}
	state := e.Pairs(t, `SELECT g.group_key, CASE WHEN c.group_key IS NULL THEN 'unseeded' WHEN c.dirty THEN 'dirty' ELSE 'clean' END
		FROM governance_group g LEFT JOIN (governance_candidate_state c JOIN v_current_ruleset cr USING (ruleset_version))
		ON c.group_key = g.group_key WHERE g.group_key = ANY($1)`, born)
	for _, k := range born {
		if state[k] == "clean" {
			t.Fatalf("group %s of a committed birth is clean: its handoff was lost", k)
		}
	}
	// Nothing else is dirty: the births' groups and the updated collections' groups are the whole dirty set.
	allowed := append(slices.Clone(born), e.groupsOfBirths(t, `x.k = ANY($1)`, changed)...)
	dirty := e.dirty(t)
	if _, extra := sameSet(dirty, allowed); len(extra) > 0 {
		t.Fatalf("%d groups dirty that no committed change affects: %v", len(extra), head(extra))
	}
	for k, r := range dirty {
		if r != "handoff:object_born" && r != "handoff:collection_changed" {
			t.Fatalf("group %s dirty for %q", k, r)
		}
	}

	// Exactly one signal per key: per (base group, id bucket, source system) for births, and no key twice anywhere.
	if n := e.Count(t, `SELECT count(*) FROM (SELECT 1 FROM event_outbox GROUP BY source_system, event_type, correlation_id
		HAVING count(*) > 1) d`); n != 0 {
		t.Fatalf("%d signal keys emitted more than once", n)
	}
	wantBorn := e.Count(t, hoBases+`SELECT count(DISTINCT (x.c, x.k, x.s, x.id / $1, x.src)) FROM x`, bucket)
	gotBorn := e.Count(t, `SELECT count(*) FROM event_outbox WHERE event_type = $1`, gcos.ChangeObjectBorn.EventType())
	keys := e.Count(t, `SELECT count(*) FROM governance_signal_key WHERE event_type = $1`, gcos.ChangeObjectBorn.EventType())
	if gotBorn != wantBorn || keys != wantBorn {
		t.Fatalf("object_born signals: %d in the outbox, %d keys, want %d (one per base group, bucket and source)", gotBorn, keys, wantBorn)
	}
	t.Logf("%d new births in %d base groups; kills: %d terminated, %d cancelled, %d deadlines; %d object_born signals",
		newBirths, bases, terminated.Load(), cancelled.Load(), deadlines.Load(), gotBorn)
}

var errRollback = errors.New("writer rolls back")

// TestSB11_SilentGap (doc 41 §41.11.6, doc 32 §1.5): with a 1 s threshold, a worker that keeps ticking with nothing
// to do raises nothing (quiet), a worker that stops ticking (hung in apply) raises handoff_silent_gap within the
// threshold and a dead scan executor candidate_scan_lag, a fresh tick resolves them, and a clean stop is told apart
// from a death in the finding's evidence.
func TestSB11_SilentGap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	cfg := gcos.DefaultConfig()
	cfg.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
	cfg.Intake.HorizonGuard = gcos.Duration(hoGuard)
	cfg.Intake.HeartbeatInterval = gcos.Duration(100 * time.Millisecond)
	cfg.Intake.SilentGapThreshold = gcos.Duration(time.Second)
	cfg.Scan.IncrementalInterval = gcos.Duration(100 * time.Millisecond)
	cfg.Scan.FullAuditInterval = gcos.Duration(100 * time.Millisecond)
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(pool, cfg, nil)
	b := &gcostest.World{Ctx: ctx, Pool: pool, Store: store, Cfg: cfg}

	// The intake worker: its apply step hangs once armed (a worker that is alive for the OS but ticks no more).
	var armed atomic.Bool
	release := make(chan struct{})
	apply := func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
		if armed.Load() && len(rows) > 0 {
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return nil, nil
	}
	workerCtx, stopWorker := context.WithCancel(ctx)
	defer stopWorker()
	workerDone := make(chan error, 1)
	defer func() {
		stopWorker()
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	w := &intake.Worker{Stage: intake.New(store), Config: cfg.Intake, DisableMonitor: true, Apply: apply}
	go func() { workerDone <- w.Run(workerCtx) }()
	// Two scan executors tick like the scheduler does; the full audit's dies later, the incremental one stays quiet.
	tick := func(name string, stop <-chan struct{}) {
		for {
			_ = store.Heartbeat(ctx, name, "scan", "ok")
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	quietStop, auditStop := make(chan struct{}), make(chan struct{})
	var bg sync.WaitGroup
	bg.Add(3)
	go func() { defer bg.Done(); tick("gcos.scan.incremental", quietStop) }()
	go func() { defer bg.Done(); tick("gcos.scan.full_audit", auditStop) }()
	// The monitor runs apart from the worker, as another process's would.
	monCtx, stopMon := context.WithCancel(ctx)
	mon := &intake.Monitor{Stage: intake.New(store), Config: cfg.Intake, Owner: "monitor-test"}
	go func() { defer bg.Done(); _ = mon.Run(monCtx) }()
	defer func() {
		stopMon()
		close(quietStop)
		select {
		case <-auditStop:
		default:
			close(auditStop)
		}
		bg.Wait()
	}()

	type finding struct {
		status, state string
		reopens       int
	}
	get := func(issue gcos.IssueType, subject string) *finding {
		var f finding
		err := pool.QueryRow(ctx, `SELECT status, coalesce(evidence_snapshot::jsonb ->> 'state', ''), reopen_count FROM system_issues
			WHERE coalesce_key = $1 ORDER BY id DESC LIMIT 1`, gcos.CoalesceKey(issue, subject)).Scan(&f.status, &f.state, &f.reopens)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		return &f
	}
	const birthExec, changeExec = "gcos.intake.birth_registry", "gcos.intake.registry_changelog"
	waitFor := func(what string, limit time.Duration, ok func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		wait.For(t, limit, what, ok)
		return time.Since(start)
	}

	// Quiet: everything keeps ticking with nothing to do; after more than the threshold nothing is raised.
	waitFor("the worker's first ticks", 5*time.Second, func() bool {
		return b.Count(t, `SELECT count(*) FROM queue_heartbeat WHERE executor_name IN ($1, $2)`, birthExec, changeExec) == 2
	})
	wait.Pass(ctx, 1400*time.Millisecond) // more than the silence threshold
	rep, err := intake.New(store).CheckSilence(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Raised) != 0 || len(rep.Executors) != 4 {
		t.Fatalf("quiet workers: raised %v over %d executors, want nothing over 4", rep.Raised, len(rep.Executors))
	}
	for _, ex := range rep.Executors {
		if ex.State != intake.ExecutorAlive {
			t.Fatalf("quiet executor %+v", ex)
		}
	}
	if n := b.Count(t, `SELECT count(*) FROM system_issues WHERE issue_type IN ('handoff_silent_gap', 'candidate_scan_lag')`); n != 0 {
		t.Fatalf("quiet workers raised %d silent-gap findings", n)
	}

	// Dead: the intake hangs in apply and the full-audit executor stops ticking.
	armed.Store(true)
	b.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system) VALUES ('x-1', 'c', 't', 'active', 'birth-api')`)
	close(auditStop)
	took := waitFor("handoff_silent_gap", 5*time.Second, func() bool {
		f, g := get(gcos.IssueHandoffSilentGap, birthExec), get(gcos.IssueCandidateScanLag, "gcos.scan.full_audit")
		return f != nil && f.status == "open" && g != nil && g.status == "open"
	})
	if f := get(gcos.IssueHandoffSilentGap, birthExec); f.state != intake.ExecutorDead {
		t.Fatalf("hung worker's finding says %q, want %q", f.state, intake.ExecutorDead)
	}
	if f := get(gcos.IssueCandidateScanLag, "gcos.scan.incremental"); f != nil {
		t.Fatalf("the quiet scan executor was reported: %+v", f)
	}
	t.Logf("silent gap raised %s after the worker hung (threshold 1s)", took)

	// A fresh tick resolves it.
	close(release)
	waitFor("resolution after the worker ticks again", 5*time.Second, func() bool {
		f, g := get(gcos.IssueHandoffSilentGap, birthExec), get(gcos.IssueHandoffSilentGap, changeExec)
		return f.status == "resolved" && (g == nil || g.status == "resolved")
	})

	// A clean stop is not a death: the finding says "stopped".
	stopWorker()
	if err := <-workerDone; err != nil {
		t.Fatalf("Run: %v", err)
	}
	waitFor("handoff_silent_gap after a clean stop", 5*time.Second, func() bool {
		f := get(gcos.IssueHandoffSilentGap, birthExec)
		return f.status == "open"
	})
	if f := get(gcos.IssueHandoffSilentGap, birthExec); f.state != intake.ExecutorStopped || f.reopens != 1 {
		t.Fatalf("after a clean stop: %+v, want state %q, re-opened once", *f, intake.ExecutorStopped)
	}
}

// TestSB11_ReplayIsNoOp (doc 41 §41.7, SPEC §9.3/§14): ResetCursor(source, "start") and a second run of the intake
// leave candidate state, the signal keys, the outbox, the pending lane, the read marks and the findings byte for byte
// as they were — dirty marks are idempotent and no signal is emitted twice — and a consumer that read its
// notifications is not notified again. Replayed after a scan, the re-dirtied groups re-scan to the same verdicts.
func TestSB11_ReplayIsNoOp(t *testing.T) {
	t.Parallel()
	e := newHandoffWorld(t, 800, nil)
	e.Exec(t, `INSERT INTO event_subscription (recipient_ref, event_domain, event_type, event_stream, scope_subject_table, scope_filter, mute)
		VALUES ('owner-replay', 'governance', NULL, 'governance.handoff', NULL, '{}', false)`)
	// Fresh changes of every kind on top of the world's history.
	var coll, class, code, pivot, owner string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT b.collection_name, b.entity_type, b.entity_code,
		(SELECT pivot_code FROM pivot_definitions ORDER BY 1 LIMIT 1), (SELECT min(id)::text FROM governance_object_ownership)
		FROM birth_registry b WHERE b.parent_code IS NULL ORDER BY b.id DESC LIMIT 1`).Scan(&coll, &class, &code, &pivot, &owner); err != nil {
		t.Fatal(err)
	}
	e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		SELECT $2 || '-replay-' || g, $1, $2, CASE WHEN g % 4 = 0 THEN 'draft' ELSE 'active' END, 'birth-api', 'birth-gateway'
		FROM generate_series(1, 60) g`, coll, class)
	e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, parent_code, source_system, actor_ref)
		VALUES ($3 || '-kid', $1, $2, 'pending', $3, 'registry-sync', 'registry-sync-bot')`, coll, class, code)
	e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES
		('collection', $1, 'update', 'ops:replay'), ('collection', $1, 'count_changed', 'registry-sync-bot'),
		('source', $1, 'source_changed', 'ops:replay'), ('pivot', $4, 'axis_introduced', 'ops:replay'),
		('ownership', $5, 'owner_changed', 'gov:council'), ('measurement', 'MSR-0002', 'policy_changed', 'gov:council'),
		($2, $3, 'update', 'birth-gateway'), ($2, $3, 'retire', 'ops:replay')`, coll, class, code, pivot, owner)
	e.catchUp(t)

	// The consumer reads everything it was notified of (the first few through MarkRead, the rest in bulk).
	notes, err := events.New(e.Store).Notifications(e.Ctx, "owner-replay", 5)
	if err != nil || len(notes) == 0 {
		t.Fatalf("notifications: %d (%v)", len(notes), err)
	}
	for _, n := range notes {
		if _, err := events.New(e.Store).MarkRead(e.Ctx, n.Event.ID, "owner-replay"); err != nil {
			t.Fatal(err)
		}
	}
	e.Exec(t, `INSERT INTO event_read (event_id, actor_ref, read_at, read_status_source)
		SELECT id, 'owner-replay', now(), 'test' FROM event_outbox o
		WHERE event_stream = 'governance.handoff' AND NOT EXISTS (SELECT 1 FROM event_read r WHERE r.event_id = o.id)`)
	notified := func(what string) {
		t.Helper()
		ns, err := events.New(e.Store).Notifications(e.Ctx, "owner-replay", 1000)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range ns {
			if n.Event.Type != "governance.handoff.heartbeat" { // a heartbeat is a new fact each run
				t.Fatalf("%s: the consumer is notified again of %s %s", what, n.Event.Type, n.Event.ID)
			}
		}
	}
	notified("before the replay")
	signals := map[string]string{
		"governance_candidate_state":  `SELECT * FROM governance_candidate_state`,
		"governance_candidate_object": `SELECT * FROM governance_candidate_object`,
		"governance_group":            `SELECT * FROM governance_group`,
		// GCOS's own announcements (source gcos: findings, runs, snapshots) are the scan's, not the intake's writes.
		"governance_signal_key": `SELECT * FROM governance_signal_key WHERE event_type <> 'governance.handoff.heartbeat'
			AND source_system <> 'gcos'`,
		"event_outbox":     `SELECT * FROM event_outbox WHERE event_type <> 'governance.handoff.heartbeat'`,
		"event_pending":    `SELECT * FROM event_pending WHERE NOT coalesce((capture_payload ->> 'announce')::boolean, false)`,
		"event_read":       `SELECT * FROM event_read`,
		"system_issues":    `SELECT * FROM system_issues`,
		"handoff findings": `SELECT * FROM system_issues WHERE issue_type LIKE 'handoff\_%' OR issue_type LIKE 'input.untrusted%'`,
	}
	snapshot := func() map[string]string {
		out := map[string]string{}
		for name, q := range signals {
			out[name] = e.Digest(t, q)
		}
		return out
	}
	compare := func(what string, before map[string]string, skip ...string) {
		t.Helper()
		after := snapshot()
		for name, d := range before {
			if d != after[name] && !slices.Contains(skip, name) {
				t.Errorf("%s changed %s", what, name)
			}
		}
	}
	before := snapshot()
	if n := e.Count(t, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version) WHERE c.dirty`); n == 0 {
		t.Fatal("the first intake dirtied nothing: the replay would prove nothing")
	}

	replay := func() {
		t.Helper()
		for _, src := range []string{"birth_registry", "registry_changelog"} {
			if _, err := intake.New(e.Store).ResetCursor(e.Ctx, src, "start"); err != nil {
				t.Fatal(err)
			}
		}
		e.takeStats()
		e.catchUp(t)
		var rows int
		for _, st := range e.takeStats() {
			rows += st.Rows
			if st.Dirtied != 0 || st.Emitted != 0 || st.Captured != 0 {
				t.Fatalf("replayed page %+v: dirtied or emitted again", st)
			}
		}
		if rows < 800 {
			t.Fatalf("the replay handed off only %d rows", rows)
		}
	}
	replay()
	compare("a replay from start", before)
	notified("after the replay")

	// After a scan, a replay re-dirties what it re-delivers; the re-scan reaches the same verdicts.
	e.ScanAll(t, postgres.ModeIncremental)
	verdicts := `SELECT group_key, ruleset_version, candidate_verdict, input_quality_state, evidence_fingerprint, member_count,
		risk_class, coverage_required, owner_scope, source_snapshot_ref FROM governance_candidate_state`
	scanned, afterScan := e.Digest(t, verdicts), snapshot()
	for _, src := range []string{"birth_registry", "registry_changelog"} {
		if _, err := intake.New(e.Store).ResetCursor(e.Ctx, src, "start"); err != nil {
			t.Fatal(err)
		}
	}
	e.catchUp(t)
	if n := e.Count(t, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version) WHERE c.dirty`); n == 0 {
		t.Fatal("a replay after the scan re-dirtied nothing")
	}
	e.ScanAll(t, postgres.ModeIncremental)
	if e.Digest(t, verdicts) != scanned {
		t.Fatal("re-scanning the replayed groups changed their verdicts")
	}
	// Re-scanning re-raises the scan's own findings (occurrence counts); what the intake wrote is unchanged.
	compare("a replay after the scan", afterScan, "governance_candidate_state", "governance_candidate_object", "system_issues")
	notified("after the second replay")
}
