package oracle_test

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"pgregory.net/rapid"

	"gcos"
	"gcos/daemon"
	"gcos/events"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/scan"
	"gcos/world"
)

// The differential test: seeded random sequences of substrate changes, each written as a well-behaved writer
// leaves it (the row and its registry_changelog row), then intake and scans run to quiescence, and the incremental
// state must equal the reference evaluator's everywhere (oracle.Verify: every group and object row, every ledger
// bucket, and the gate for every object with a row plus a sample). rapid shrinks a failing sequence to the shortest
// one that still fails and prints its steps.
//
// Default run: a few short sequences. Soak: go test ./oracle -run TestDifferential -rapid.checks=200 -oracle.steps=12
// (more and longer sequences; the package comes before the flags).

const (
	worldBirths   = 1500
	stepSample    = 200  // gate sample after each step
	everySample   = 300  // gate sample when each trigger runs alone (beside the objects it changed)
	finalSample   = 2000 // gate sample at the end of a sequence
	defaultChecks = 3
	defaultSteps  = 6
)

var maxSteps = flag.Int("oracle.steps", defaultSteps, "the differential test's longest sequence of triggers")

// knownDivergence is one way in which the incremental state is known to differ from the reference after a
// trigger, because its fix belongs to another open issue. The random test tolerates exactly these mismatches (by
// kind and field) once one of the entry's triggers has run in a sequence. TestEveryTrigger asserts that each of
// triggers still causes it when run alone (so a fix fails that test and the entry must shrink or go); sometimes
// lists triggers that cause it only for some objects (tolerated, not asserted).
type knownDivergence struct {
	triggers  []string
	sometimes []string
	kind      string // group, object, ledger or gate
	field     string // a Mismatch field, or * for any
	why       string
}

// knownDivergences is empty: the incremental state equals the reference after every trigger. An entry reads
// {triggers: []string{"name"}, kind: "object", field: "*", why: "…"}.
var knownDivergences = []knownDivergence{}

// explains reports whether the entry covers mismatch m.
func (k knownDivergence) explains(m oracle.Mismatch) bool {
	return k.kind == m.Kind && (k.field == "*" || k.field == m.Field)
}

// after reports whether the entry applies once the triggers ran.
func (k knownDivergence) after(ran []string) bool {
	return slices.ContainsFunc(ran, func(t string) bool { return slices.Contains(k.triggers, t) || slices.Contains(k.sometimes, t) })
}

// trigger is one kind of change to the substrate, written as its writer would write it.
type trigger struct {
	name  string
	apply func(e *env, r *rand.Rand) (string, error)
}

// env is one world under test: a database cloned from the built world, a store, the intake and the scans.
type env struct {
	ctx     context.Context
	pool    *pgxpool.Pool
	store   *postgres.Store
	intake  *intake.Worker
	scans   *scan.Scheduler
	gate    *gate.Gate        // the daemon's gate, re-scanning through its scans
	view    *gate.VerdictView // the gate's view, caught up by Verify: view == database == reference
	seq     int
	touched []string // objects a trigger changed: the gate is always asked about them
	// rescanned counts the gate's answers taken on verdicts it re-scanned synchronously (settle asks it mid-flight).
	rescanned int
}

// trustedSources are the world's source systems; a birth from any other is untrusted.
// trustedSources: gcos:* is trusted here so that the gcos_prefixed trigger shows such a row acting like any other
// (GCOS knows its own rows by id, not by name); untrusted_changelog covers the quarantine.
var trustedSources = []string{"import-*", "birth-*", "registry-*", "gcos:*"}

// envConfig adjusts the default configuration for the differential runs.
func envConfig(cfg *gcos.Config) {
	cfg.Scan.CoalesceWindow = gcos.Duration(time.Millisecond)
	cfg.Scan.StormFraction = 1
	cfg.Intake.TrustedSources = trustedSources
	cfg.Intake.PollInterval = gcos.Duration(10 * time.Millisecond)
	// The view is caught up by Verify, not by its loop: a bound longer than any verification keeps it answering.
	cfg.Gate.MaxStaleness, cfg.Gate.ViewRefresh = gcos.Duration(time.Hour), gcos.Duration(time.Minute)
	// Every synchronous re-scan the gate starts in settle finishes: what it commits is compared, not its timing.
	cfg.Gate.RescanDeadline = gcos.Duration(time.Minute)
}

// builtWorld generates, backfills, activates and scans one world for a test, and closes it: every run clones it.
func builtWorld(t *testing.T) *pgxpool.Pool {
	t.Helper()
	w := gcostest.Ready(t, gcostest.Options{Births: worldBirths, Seed: 19, Config: envConfig})
	pool := w.Pool
	e := &env{ctx: w.Ctx, pool: pool, store: w.Store}
	e.wire()
	if err := e.settle(); err != nil {
		t.Fatalf("settle the world: %v", err)
	}
	pool.Close()
	return pool
}

// newEnv clones the built world for one run; t owns the clone (Drop ends it sooner).
func newEnv(t *testing.T, built *pgxpool.Pool) *env {
	w := gcostest.Over(t, pgtest.Clone(t, built), envConfig)
	e := &env{ctx: w.Ctx, pool: w.Pool, store: w.Store}
	e.wire()
	// Loaded before the first trigger: what the view holds afterwards came through its change feed.
	if err := e.view.CatchUp(e.ctx); err != nil {
		t.Fatalf("gate view: %v", err)
	}
	return e
}

// wire assembles the daemon over the store; the test steps its intake and scans (Once) instead of running them.
func (e *env) wire() {
	d, err := daemon.New(daemon.Config{Store: e.store})
	if err != nil {
		panic(err) // only a nil store is refused
	}
	e.intake, e.scans, e.gate, e.view = d.Intake, d.Scan, d.Gate, d.Gate.View()
}

// settle runs intake and incremental scans until no group is dirty, polling with a generous deadline. After the
// first intake pass, before any scan, the gate is asked about every object the trigger changed, as a pipeline
// would mid-flight: a high-risk object whose group the change left stale is re-scanned by the gate itself (SPEC
// §12), and what that re-scan commits must equal the reference like everything else.
func (e *env) settle() error {
	deadline := time.Now().Add(2 * time.Minute)
	for i := 0; time.Now().Before(deadline); i++ {
		wait.Pass(e.ctx, 30*time.Millisecond) // past the tail's horizon guard
		if _, err := e.intake.Once(e.ctx); err != nil {
			return fmt.Errorf("intake: %w", err)
		}
		if i == 0 {
			if err := e.askMidFlight(); err != nil {
				return err
			}
		}
		if _, err := e.scans.Once(e.ctx, postgres.ModeIncremental); err != nil {
			return fmt.Errorf("scan: %w", err)
		}
		n, err := gcostest.DirtyGroups(e.ctx, e.store.Pool())
		if err != nil {
			return err
		}
		// Settled also means every tailed row is accounted for: the id sweep (rows behind the cursor) has passed
		// the last id of each source.
		var swept bool
		if err := e.pool.QueryRow(e.ctx, `SELECT bool_and(c.swept_id IS NOT NULL AND c.swept_id >= CASE c.source
			    WHEN 'birth_registry' THEN (SELECT coalesce(max(id), 0) FROM birth_registry)
			    ELSE (SELECT coalesce(max(id), 0) FROM registry_changelog) END)
			FROM gov_worker_cursor c`).Scan(&swept); err != nil {
			return err
		}
		if n == 0 && swept {
			return nil
		}
	}
	return fmt.Errorf("the dirty set did not drain within 2 minutes")
}

// askMidFlight asks the gate, before any scan, about every object the trigger changed and one object of each group
// the trigger left dirty or expired (up to 40), counting the answers it took on verdicts it re-scanned itself.
func (e *env) askMidFlight() error {
	stale, err := e.strings(`SELECT o FROM (
		SELECT DISTINCT ON (c.group_key) c.group_key, b.collection_name || ':' || b.entity_code AS o
		FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
		JOIN governance_group g USING (group_key)
		JOIN birth_registry b ON (b.entity_type, b.collection_name, b.status) = (g.object_class, g.source_registry, g.lifecycle_status)
		WHERE (c.dirty OR c.stale_after <= now()) AND b.parent_code IS NULL
		ORDER BY c.group_key, b.id) x ORDER BY group_key LIMIT 40`)
	if err != nil {
		return fmt.Errorf("objects of stale groups: %w", err)
	}
	for _, object := range append(slices.Clone(e.touched), stale...) {
		if e.gate.Gate(e.ctx, object, gcos.ActionWrite).Rescanned {
			e.rescanned++
		}
	}
	return nil
}

func (e *env) exec(sql string, args ...any) error {
	_, err := e.pool.Exec(e.ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", strings.Fields(sql)[0], err)
	}
	return nil
}

// changelog writes the registry_changelog row a well-behaved writer leaves with its change.
func (e *env) changelog(entityType, code, action, by string) error {
	return e.exec(`INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by, alert_detail)
		VALUES ($1, $2, $3, $4, 'differential test')`, entityType, code, action, by)
}

func (e *env) strings(sql string, args ...any) ([]string, error) {
	rows, err := e.pool.Query(e.ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// object picks one active object that is not an inherited child: class, collection, code.
func (e *env) object(r *rand.Rand, where string) (class, coll, code string, err error) {
	codes, err := e.strings(`SELECT entity_type || '|' || collection_name || '|' || entity_code FROM birth_registry
		WHERE parent_code IS NULL AND ` + where + ` ORDER BY id`)
	if err != nil {
		return "", "", "", err
	}
	if len(codes) == 0 {
		return "", "", "", fmt.Errorf("no object where %s", where)
	}
	p := strings.SplitN(pick(r, codes), "|", 3)
	return p[0], p[1], p[2], nil
}

func (e *env) fingerprint(coll, code string) (string, error) {
	var fp string
	err := e.pool.QueryRow(e.ctx, e.store.BirthBinding().ObjectFingerprintSQL(), coll, code).Scan(&fp)
	return fp, err
}

func (e *env) births(r *rand.Rand, n int, source string) error {
	classes, err := e.strings(`SELECT entity_type || '|' || registry_collection FROM meta_catalog
		WHERE registry_collection IS NOT NULL ORDER BY entity_type`)
	if err != nil {
		return err
	}
	for range n {
		p := strings.SplitN(pick(r, classes), "|", 2)
		e.seq++
		if err := e.exec(`INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ($1, $2, $3, 'active', $4, 'differential')`, fmt.Sprintf("%s-d%d-%d", p[0], e.seq, r.Uint32()), p[1], p[0], source); err != nil {
			return err
		}
	}
	return nil
}

// Which object a lifecycle trigger moves: one whose new group must appear, one whose new group exists already,
// or one with an object row. All are governed objects (a relevant collection and class) that are not children.
const (
	toNewGroup = iota
	toExistingGroup
	withObjectRow
)

// lifecycle moves one object to status, with the changelog row of action.
func lifecycle(action, status string, which int) func(e *env, r *rand.Rand) (string, error) {
	return func(e *env, r *rand.Rand) (string, error) {
		where := `status = 'active'
			AND collection_name IN (SELECT collection_name FROM collection_registry
			                        WHERE coverage_status = 'BIRTH_REQUIRED' AND scope_class = 'IN_SCOPE')
			AND entity_type IN (SELECT entity_type FROM governance_coverage_profile
			                    WHERE coverage_required AND coalesce(privacy, 'shared') = 'shared')`
		rowClasses := `(SELECT entity_type FROM governance_coverage_profile WHERE independently_authoritative OR write_path)`
		sibling := `EXISTS (SELECT 1 FROM birth_registry o WHERE o.entity_type = birth_registry.entity_type
			AND o.collection_name = birth_registry.collection_name AND o.status = '` + status + `')`
		switch which {
		case toNewGroup:
			where += " AND entity_type NOT IN " + rowClasses + " AND NOT " + sibling
		case toExistingGroup:
			where += " AND entity_type NOT IN " + rowClasses + " AND " + sibling
		case withObjectRow:
			where += ` AND collection_name || ':' || entity_code IN (SELECT object_ref FROM governance_candidate_object
				WHERE lifecycle_status = 'active') AND NOT ` + sibling
		}
		class, coll, code, err := e.object(r, where)
		if err != nil {
			return "", err
		}
		if err := e.exec(`UPDATE birth_registry SET status = $3 WHERE collection_name = $1 AND entity_code = $2`, coll, code, status); err != nil {
			return "", err
		}
		e.touched = append(e.touched, coll+":"+code)
		return fmt.Sprintf("%s %s:%s", action, coll, code), e.changelog(class, code, action, "registry-sync")
	}
}

var triggers = []trigger{
	{"births", func(e *env, r *rand.Rand) (string, error) {
		n := 1 + r.IntN(20)
		return fmt.Sprintf("%d births", n), e.births(r, n, "birth-api")
	}},
	{"children", func(e *env, r *rand.Rand) (string, error) {
		n := 1 + r.IntN(30)
		c, err := world.AddChildren(e.ctx, e.pool, n, r.Uint64()|1)
		return fmt.Sprintf("%d children under %s", n, c), err
	}},
	{"retire", lifecycle("retire", "retired", toNewGroup)},
	{"supersede", lifecycle("supersede", "superseded", toNewGroup)},
	{"merge", lifecycle("merge", "merged", toNewGroup)},
	{"retire_into_existing", lifecycle("retire", "retired", toExistingGroup)},
	{"retire_object_row", lifecycle("retire", "retired", withObjectRow)},
	{"coverage", func(e *env, r *rand.Rand) (string, error) {
		colls, err := e.strings(`SELECT collection_name FROM collection_registry ORDER BY 1`)
		if err != nil {
			return "", err
		}
		coll := pick(r, colls)
		status := pick(r, []string{"BIRTH_REQUIRED", "BIRTH_DEFERRED_NEEDS_REVIEW", "BIRTH_EXEMPT_SYSTEM"})
		class := pick(r, []string{"IN_SCOPE", "USER_EXCLUDED", "FUTURE_SCOPE"})
		if err := e.exec(`UPDATE collection_registry SET coverage_status = $2, scope_class = $3 WHERE collection_name = $1`, coll, status, class); err != nil {
			return "", err
		}
		return fmt.Sprintf("collection %s → %s/%s", coll, status, class), e.changelog("collection", coll, "update", "registry-sync")
	}},
	{"owner_moved", func(e *env, r *rand.Rand) (string, error) {
		ids, err := e.strings(`SELECT id::text FROM governance_object_ownership WHERE status = 'active' ORDER BY id`)
		if err != nil || len(ids) == 0 {
			return "", fmt.Errorf("no ownership row (%v)", err)
		}
		id := pick(r, ids)
		owner := fmt.Sprintf("team-moved-%d", r.IntN(1000))
		if err := e.exec(`UPDATE governance_object_ownership SET owner_ref = $2 WHERE id = $1::bigint`, id, owner); err != nil {
			return "", err
		}
		return fmt.Sprintf("ownership %s → %s", id, owner), e.changelog("ownership", id, "update", "registry-sync")
	}},
	{"retire_before_handoff", func(e *env, r *rand.Rand) (string, error) {
		// A birth retired (or superseded, or merged) before the intake handed it off, as the demo's churn does to
		// recent births: the tail reads the row as it is now, and the change row after it.
		classes, err := e.strings(`SELECT entity_type || '|' || registry_collection FROM meta_catalog
			WHERE registry_collection IS NOT NULL ORDER BY entity_type`)
		if err != nil {
			return "", err
		}
		p := strings.SplitN(pick(r, classes), "|", 2)
		e.seq++
		code := fmt.Sprintf("%s-h%d-%d", p[0], e.seq, r.Uint32())
		if err := e.exec(`INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ($1, $2, $3, 'active', 'birth-api', 'differential')`, code, p[1], p[0]); err != nil {
			return "", err
		}
		action := pick(r, []string{"retire", "supersede", "merge"})
		status := map[string]string{"retire": "retired", "supersede": "superseded", "merge": "merged"}[action]
		if err := e.exec(`UPDATE birth_registry SET status = $3 WHERE collection_name = $1 AND entity_code = $2`, p[1], code, status); err != nil {
			return "", err
		}
		e.touched = append(e.touched, p[1]+":"+code)
		return fmt.Sprintf("%s of %s:%s before its handoff", action, p[1], code), e.changelog(p[0], code, action, "registry-sync")
	}},
	{"owner_revoked", func(e *env, r *rand.Rand) (string, error) {
		// An owner's row revoked (as the demo's churn does): the groups it covered lose their owner or fall back to a
		// less specific one.
		ids, err := e.strings(`SELECT id::text FROM governance_object_ownership WHERE status = 'active' ORDER BY id`)
		if err != nil || len(ids) == 0 {
			return "", fmt.Errorf("no ownership row (%v)", err)
		}
		id := pick(r, ids)
		if err := e.exec(`UPDATE governance_object_ownership SET status = 'revoked' WHERE id = $1::bigint`, id); err != nil {
			return "", err
		}
		return "ownership " + id + " revoked", e.changelog("ownership", id, "update", "registry-sync")
	}},
	{"unsigned_changelog", func(e *env, r *rand.Rand) (string, error) {
		// A change row with no writer at all (the demo's untrusted row): never trusted, whatever the globs say.
		class, coll, code, err := e.object(r, "status = 'active'")
		if err != nil {
			return "", err
		}
		if err := e.exec(`INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by, alert_detail)
			VALUES ($1, $2, 'update', '', 'differential test')`, class, code); err != nil {
			return "", err
		}
		return "an unsigned update of " + coll + ":" + code, nil
	}},
	{"owner_new", func(e *env, r *rand.Rand) (string, error) {
		// An owner for a class that has none in a scope: a high-risk relevant group there was an orphan.
		orphans, err := e.strings(`SELECT scope || '|' || object_class || '|' || source_registry || '|' || lifecycle_status
			FROM v_candidate_effective WHERE coverage_outcome = 'orphan' AND risk_class <> 'read_descriptive' ORDER BY group_key`)
		if err != nil || len(orphans) == 0 {
			return "", fmt.Errorf("no orphan group (%v)", err)
		}
		o := strings.SplitN(pick(r, orphans), "|", 4)
		var id, object string
		if err := e.pool.QueryRow(e.ctx, `INSERT INTO governance_object_ownership (scope_code, entity_type, owner_ref)
			VALUES ($1, $2, $3) RETURNING id::text`, o[0], o[1], fmt.Sprintf("team-new-%d", r.IntN(1000))).Scan(&id); err != nil {
			return "", err
		}
		if err := e.pool.QueryRow(e.ctx, `SELECT min(collection_name || ':' || entity_code) FROM birth_registry
			WHERE entity_type = $1 AND collection_name = $2 AND status = $3 AND parent_code IS NULL`, o[1], o[2], o[3]).Scan(&object); err != nil {
			return "", err
		}
		e.touched = append(e.touched, object)
		return fmt.Sprintf("new owner of %s in %s", o[1], o[0]), e.changelog("ownership", id, "create", "registry-sync")
	}},
	{"exception_group", func(e *env, r *rand.Rand) (string, error) {
		class, coll, _, err := e.object(r, "true")
		if err != nil {
			return "", err
		}
		scopes, err := e.strings(`SELECT scope_code FROM governance_responsibility_scope ORDER BY 1`)
		if err != nil {
			return "", err
		}
		e.seq++
		id := fmt.Sprintf("EXC-G-%d-%d", e.seq, r.IntN(1e6))
		if err := e.exec(`INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, approval_ref, expires_at)
			VALUES ($1, $2, $3, $4, 'APR-X', now() + interval '1 day')`, id, pick(r, scopes), class, coll); err != nil {
			return "", err
		}
		return "group exception " + id + " on " + class, e.changelog("exception", id, "create", "registry-sync")
	}},
	{"exception_object", func(e *env, r *rand.Rand) (string, error) {
		id, obj, err := e.objectException(r, "1 day")
		return "object exception " + id + " on " + obj, err
	}},
	{"exception_expires", func(e *env, r *rand.Rand) (string, error) {
		id, obj, err := e.objectException(r, "2 seconds")
		if err != nil {
			return "", err
		}
		if err := e.settle(); err != nil {
			return "", err
		}
		// Expiry is read-time: no changelog row, no scan; only the database clock moves past expires_at.
		var qerr error
		expired := wait.Until(2*time.Minute, func() bool {
			var done bool
			qerr = e.pool.QueryRow(e.ctx, `SELECT now() >= expires_at FROM governance_exception WHERE exception_id = $1`, id).Scan(&done)
			return qerr != nil || done
		})
		switch {
		case qerr != nil:
			return "", qerr
		case !expired:
			return "", fmt.Errorf("exception %s never expired by the database clock", id)
		}
		return "object exception " + id + " on " + obj + " expired by the clock", nil
	}},
	{"fingerprint_changed", func(e *env, r *rand.Rand) (string, error) {
		id, obj, err := e.objectException(r, "1 day")
		if err != nil {
			return "", err
		}
		if err := e.settle(); err != nil {
			return "", err
		}
		coll, code, _ := strings.Cut(obj, ":")
		var class string
		if err := e.pool.QueryRow(e.ctx, `UPDATE birth_registry SET actor_ref = 'changed-' || actor_ref
			WHERE collection_name = $1 AND entity_code = $2 RETURNING entity_type`, coll, code).Scan(&class); err != nil {
			return "", err
		}
		return "object " + obj + " under exception " + id + " changed", e.changelog(class, code, "update", "registry-sync")
	}},
	{"exception_revoked", func(e *env, r *rand.Rand) (string, error) {
		// A risk desk revokes an object exception by moving its expiry into the past, with its changelog row. A full
		// audit ran in between: the object's row and its coverage carry the terms as granted (a year).
		id, obj, err := e.objectException(r, "1 year")
		if err != nil {
			return "", err
		}
		if err := e.settle(); err != nil {
			return "", err
		}
		if _, err := scan.New(e.store).FullAudit(e.ctx, nil); err != nil {
			return "", err
		}
		if err := e.exec(`UPDATE governance_exception SET expires_at = now() - interval '1 minute' WHERE exception_id = $1`, id); err != nil {
			return "", err
		}
		return "object exception " + id + " on " + obj + " revoked (expiry moved into the past)", e.changelog("exception", id, "update", "registry-risk-desk")
	}},
	{"exception_orphan_edited", func(e *env, r *rand.Rand) (string, error) {
		// An exception granted on one high-risk orphan object, pinned to its fingerprint; its birth row edited after.
		class, coll, code, err := e.object(r, `status = 'active' AND (entity_type, collection_name) IN (
			SELECT object_class, source_registry FROM v_candidate_effective
			WHERE coverage_outcome = 'orphan' AND risk_class <> 'read_descriptive' AND lifecycle_status = 'active')`)
		if err != nil {
			return "", err
		}
		var scope string
		if err := e.pool.QueryRow(e.ctx, `SELECT min(scope) FROM v_candidate_effective WHERE coverage_outcome = 'orphan'
			AND object_class = $1 AND source_registry = $2 AND lifecycle_status = 'active'`, class, coll).Scan(&scope); err != nil {
			return "", err
		}
		fp, err := e.fingerprint(coll, code)
		if err != nil {
			return "", err
		}
		e.seq++
		id := fmt.Sprintf("EXC-OO-%d-%d", e.seq, r.IntN(1e6))
		obj := coll + ":" + code
		e.touched = append(e.touched, obj)
		if err := e.exec(`INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, entity_code,
			approval_ref, expires_at, fingerprint) VALUES ($1, $2, $3, $4, $5, 'APR-X', now() + interval '1 day', $6)`,
			id, scope, class, coll, code, fp); err != nil {
			return "", err
		}
		if err := e.changelog("exception", id, "create", "registry-sync"); err != nil {
			return "", err
		}
		if err := e.settle(); err != nil {
			return "", err
		}
		if err := e.exec(`UPDATE birth_registry SET actor_ref = 'edited-' || coalesce(actor_ref, '') WHERE collection_name = $1 AND entity_code = $2`,
			coll, code); err != nil {
			return "", err
		}
		return "exception " + id + " on orphan " + obj + " in " + scope + ", then its birth row edited", e.changelog(class, code, "update", "registry-sync")
	}},
	{"owner_dispute", func(e *env, r *rand.Rand) (string, error) {
		// A second owner for a collection that has one in a scope: equally specific rows, different owners.
		owned, err := e.strings(`SELECT scope_code || '|' || collection_name FROM governance_object_ownership
			WHERE status = 'active' AND entity_type IS NULL AND collection_name IS NOT NULL ORDER BY id`)
		if err != nil || len(owned) == 0 {
			return "", fmt.Errorf("no collection owner (%v)", err)
		}
		o := strings.SplitN(pick(r, owned), "|", 2)
		var id, object string
		if err := e.pool.QueryRow(e.ctx, `INSERT INTO governance_object_ownership (scope_code, collection_name, owner_ref)
			VALUES ($1, $2, $3) RETURNING id::text`, o[0], o[1], fmt.Sprintf("team-rival-%d", r.IntN(1000))).Scan(&id); err != nil {
			return "", err
		}
		if err := e.pool.QueryRow(e.ctx, `SELECT coalesce(min(collection_name || ':' || entity_code), '') FROM birth_registry
			WHERE collection_name = $1 AND status = 'active' AND parent_code IS NULL`, o[1]).Scan(&object); err != nil {
			return "", err
		}
		if object != "" {
			e.touched = append(e.touched, object)
		}
		return "a rival owner of " + o[1] + " in " + o[0], e.changelog("ownership", id, "create", "registry-sync")
	}},
	{"writer_with_slash", func(e *env, r *rand.Rand) (string, error) {
		// A changelog row from a writer whose name has a '/': trusted by a glob like any other name.
		class, coll, code, err := e.object(r, "status = 'active'")
		if err != nil {
			return "", err
		}
		if err := e.exec(`UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, coll, code); err != nil {
			return "", err
		}
		e.touched = append(e.touched, coll+":"+code)
		return "retire of " + coll + ":" + code + " logged by registry-sync/eu-west", e.changelog(class, code, "retire", "registry-sync/eu-west")
	}},
	{"ruleset", func(e *env, r *rand.Rand) (string, error) {
		classes, err := e.strings(`SELECT entity_type FROM governance_coverage_profile ORDER BY 1`)
		if err != nil {
			return "", err
		}
		class := pick(r, classes)
		if err := e.exec(`UPDATE governance_coverage_profile SET coverage_required = NOT coalesce(coverage_required, true) WHERE entity_type = $1`, class); err != nil {
			return "", err
		}
		v, err := e.activate()
		return "coverage_required of " + class + " flipped; ruleset " + v + " activated", err
	}},
	{"ruleset_object_rows", func(e *env, r *rand.Rand) (string, error) {
		// A ruleset bump that changes the verdict of a class whose objects have rows.
		classes, err := e.strings(`SELECT DISTINCT object_type FROM governance_candidate_object WHERE lifecycle_status = 'active' ORDER BY 1`)
		if err != nil || len(classes) == 0 {
			return "", fmt.Errorf("no object rows (%v)", err)
		}
		class := pick(r, classes)
		if err := e.exec(`UPDATE governance_coverage_profile SET coverage_required = NOT coalesce(coverage_required, true) WHERE entity_type = $1`, class); err != nil {
			return "", err
		}
		var object string
		if err := e.pool.QueryRow(e.ctx, `SELECT min(object_ref) FROM governance_candidate_object WHERE object_type = $1 AND lifecycle_status = 'active'`,
			class).Scan(&object); err != nil {
			return "", err
		}
		e.touched = append(e.touched, object)
		v, err := e.activate()
		return "coverage_required of " + class + " (objects with rows) flipped; ruleset " + v + " activated", err
	}},
	{"silent_coverage_then_audit", func(e *env, r *rand.Rand) (string, error) {
		// A registry edit with no change row: only the full audit's registry fingerprints can find it.
		colls, err := e.strings(`SELECT collection_name FROM collection_registry ORDER BY 1`)
		if err != nil {
			return "", err
		}
		coll := pick(r, colls)
		status := pick(r, []string{"BIRTH_REQUIRED", "BIRTH_DEFERRED_NEEDS_REVIEW", "BIRTH_EXEMPT_SYSTEM"})
		if err := e.exec(`UPDATE collection_registry SET coverage_status = $2 WHERE collection_name = $1`, coll, status); err != nil {
			return "", err
		}
		if _, err := scan.New(e.store).FullAudit(e.ctx, nil); err != nil {
			return "", err
		}
		return fmt.Sprintf("silent coverage edit of %s → %s, then a full audit", coll, status), nil
	}},
	// Registry edits with no change row and no audit: the intake's registry watch finds them.
	{"silent_owner_revoked", func(e *env, r *rand.Rand) (string, error) {
		ids, err := e.strings(`SELECT id::text FROM governance_object_ownership WHERE status = 'active' ORDER BY id`)
		if err != nil || len(ids) == 0 {
			return "", fmt.Errorf("no ownership row (%v)", err)
		}
		id := pick(r, ids)
		return "ownership " + id + " revoked with no change row", e.exec(`UPDATE governance_object_ownership SET status = 'revoked' WHERE id = $1::bigint`, id)
	}},
	{"silent_exception_granted", func(e *env, r *rand.Rand) (string, error) {
		orphans, err := e.strings(`SELECT scope || '|' || object_class || '|' || source_registry FROM v_candidate_effective
			WHERE coverage_outcome = 'orphan' AND lifecycle_status = 'active' ORDER BY group_key`)
		if err != nil || len(orphans) == 0 {
			return "", fmt.Errorf("no orphan group (%v)", err)
		}
		o := strings.SplitN(pick(r, orphans), "|", 3)
		e.seq++
		id := fmt.Sprintf("EXC-SILENT-%d-%d", e.seq, r.Uint32())
		return fmt.Sprintf("exception %s on %s in %s with no change row", id, o[1], o[0]), e.exec(`INSERT INTO governance_exception
			(exception_id, scope_code, entity_type, collection_name, approval_ref, expires_at) VALUES ($1, $2, $3, $4, 'APR-S', now() + interval '1 day')`,
			id, o[0], o[1], o[2])
	}},
	{"silent_coverage", func(e *env, r *rand.Rand) (string, error) {
		colls, err := e.strings(`SELECT collection_name FROM collection_registry ORDER BY 1`)
		if err != nil {
			return "", err
		}
		coll := pick(r, colls)
		status := pick(r, []string{"BIRTH_REQUIRED", "BIRTH_DEFERRED_NEEDS_REVIEW", "BIRTH_EXEMPT_SYSTEM"})
		return fmt.Sprintf("collection %s → %s with no change row", coll, status),
			e.exec(`UPDATE collection_registry SET coverage_status = $2 WHERE collection_name = $1`, coll, status)
	}},
	{"silent_then_audit", silentRetire(false, false)},
	{"silent_delete_then_audit", func(e *env, r *rand.Rand) (string, error) {
		// Births handed off and scanned, one of them then deleted with no change row: its group holds what the
		// previous audit saw again, and only the audit's check of the counts themselves finds the difference.
		if err := e.births(r, 1+r.IntN(3), "birth-api"); err != nil {
			return "", err
		}
		if err := e.settle(); err != nil {
			return "", err
		}
		var coll, code string
		if err := e.pool.QueryRow(e.ctx, `DELETE FROM birth_registry WHERE id = (SELECT max(id) FROM birth_registry)
			RETURNING collection_name, entity_code`).Scan(&coll, &code); err != nil {
			return "", err
		}
		if _, err := scan.New(e.store).FullAudit(e.ctx, nil); err != nil {
			return "", err
		}
		return "silent delete of " + coll + ":" + code + ", then a full audit", nil
	}},
	{"silent_then_audit_last", silentRetire(true, false)},
	// The soak found the view judging a silently retired object on the birth it had cached before the audit.
	{"silent_then_audit_cached", silentRetire(true, true)},
	{"untrusted_birth", func(e *env, r *rand.Rand) (string, error) {
		return "a birth from an untrusted source", e.births(r, 1, "rogue-writer")
	}},
	{"untrusted_changelog", func(e *env, r *rand.Rand) (string, error) {
		// A forged row: it claims a retire that never happened, from a writer no one trusts.
		class, coll, code, err := e.object(r, "status = 'active'")
		if err != nil {
			return "", err
		}
		return "a forged retire of " + coll + ":" + code + " by an untrusted writer", e.changelog(class, code, "retire", "rogue-writer")
	}},
	{"resolve_by_hand", func(e *env, r *rand.Rand) (string, error) {
		// A person resolves an open finding, preferably one that holds an object row: the row's reason lapses and
		// its group is re-evaluated. With none open, an untrusted birth opens one for a later step.
		ids, err := e.strings(`SELECT i.id::text FROM system_issues i WHERE i.status = 'open' AND i.coalesce_key LIKE 'gov:%'
			ORDER BY EXISTS (SELECT 1 FROM governance_candidate_object o WHERE o.input_quality_ref = i.id OR o.issue_ref = i.id) DESC, i.id
			LIMIT 3`)
		if err != nil {
			return "", err
		}
		if len(ids) == 0 {
			return "a birth from an untrusted source (no finding open to resolve by hand)", e.births(r, 1, "rogue-writer")
		}
		id, _ := strconv.ParseInt(ids[0], 10, 64)
		_, err = events.New(e.store).ResolveFindingAs(e.ctx, id, "resolved by hand", gcos.Actor{Principal: "differential", Via: gcos.ViaCLI})
		return "finding " + ids[0] + " resolved by hand", err
	}},
	{"gcos_prefixed", func(e *env, r *rand.Rand) (string, error) {
		class, coll, code, err := e.object(r, "status = 'active'")
		if err != nil {
			return "", err
		}
		if err := e.exec(`UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, coll, code); err != nil {
			return "", err
		}
		e.touched = append(e.touched, coll+":"+code)
		return "retire of " + coll + ":" + code + " logged as gcos:forged", e.changelog(class, code, "retire", "gcos:forged")
	}},
	{"birth_object_row", func(e *env, r *rand.Rand) (string, error) {
		classes, err := e.strings(`SELECT p.entity_type || '|' || m.registry_collection FROM governance_coverage_profile p
			JOIN meta_catalog m USING (entity_type) WHERE p.independently_authoritative AND m.registry_collection IS NOT NULL ORDER BY 1`)
		if err != nil || len(classes) == 0 {
			return "", fmt.Errorf("no independently authoritative class (%v)", err)
		}
		c := strings.SplitN(pick(r, classes), "|", 2)
		e.seq++
		code := fmt.Sprintf("%s-d%d-%d", c[0], e.seq, r.Uint32())
		return "birth of " + c[1] + ":" + code + " (independently authoritative)", e.exec(`INSERT INTO birth_registry
			(entity_code, collection_name, entity_type, status, source_system, actor_ref) VALUES ($1, $2, $3, 'active', 'birth-api', 'differential')`,
			code, c[1], c[0])
	}},
	{"base_emptied_and_refilled", func(e *env, r *rand.Rand) (string, error) {
		// A base of one object with a row empties (its object retired) while a newborn refills it, both handed off
		// before a scan: its groups must not be retired with the newborn's row linked to them, nor the newborn left
		// without its row.
		// A base no birth is in yet, while there is one (a long sequence may run out of them: then any such base).
		classes, err := e.strings(`SELECT p.entity_type || '|' || m.registry_collection FROM governance_coverage_profile p
			JOIN meta_catalog m USING (entity_type) WHERE p.independently_authoritative AND m.registry_collection IS NOT NULL
			ORDER BY EXISTS (SELECT 1 FROM birth_registry b WHERE b.entity_type = p.entity_type
			                 AND b.collection_name = m.registry_collection AND b.status = 'superseded'), 1`)
		if err != nil || len(classes) == 0 {
			return "", fmt.Errorf("no independently authoritative class (%v)", err)
		}
		c := strings.SplitN(classes[0], "|", 2)
		born := func() (string, error) {
			e.seq++
			code := fmt.Sprintf("%s-d%d-%d", c[0], e.seq, r.Uint32())
			return code, e.exec(`INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
				VALUES ($1, $2, $3, 'superseded', 'birth-api', 'differential')`, code, c[1], c[0])
		}
		first, err := born()
		if err != nil {
			return "", err
		}
		if err := e.settle(); err != nil {
			return "", err
		}
		if err := e.exec(`UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, c[1], first); err != nil {
			return "", err
		}
		if err := e.changelog(c[0], first, "retire", "registry-sync"); err != nil {
			return "", err
		}
		second, err := born()
		if err != nil {
			return "", err
		}
		e.touched = append(e.touched, c[1]+":"+first, c[1]+":"+second)
		return fmt.Sprintf("base %s/%s/superseded emptied by %s, refilled by %s", c[0], c[1], first, second), nil
	}},
	{"replay", func(e *env, r *rand.Rand) (string, error) {
		// An operator replays the births tail from a few births back: nothing may be counted twice. The watermark is
		// taken among the births the cursor has passed (births dated ahead, and children born after them, are not).
		if err := e.births(r, 3, "birth-api"); err != nil {
			return "", err
		}
		if err := e.settle(); err != nil {
			return "", err
		}
		var from string
		if err := e.pool.QueryRow(e.ctx, `SELECT to_char(born_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
			FROM birth_registry
			WHERE (born_at, id) <= (SELECT position_tstz, position_id FROM gov_worker_cursor WHERE source = 'birth_registry')
			ORDER BY born_at DESC, id DESC OFFSET 2 LIMIT 1`).Scan(&from); err != nil {
			return "", err
		}
		if _, err := intake.New(e.store).ResetCursor(e.ctx, "birth_registry", from); err != nil {
			return "", err
		}
		return "births tail replayed from " + from, nil
	}},
	{"late_birth", func(e *env, r *rand.Rand) (string, error) {
		// Late data: a birth whose born_at lies an hour behind the tail's cursor.
		if err := e.births(r, 1, "birth-api"); err != nil {
			return "", err
		}
		return "a birth born an hour ago", e.exec(`UPDATE birth_registry SET born_at = now() - interval '1 hour'
			WHERE id = (SELECT max(id) FROM birth_registry)`)
	}},
	{"future_birth", func(e *env, r *rand.Rand) (string, error) {
		// A writer dates a birth an hour ahead: it is handed off at once, not when the clock gets there.
		if err := e.births(r, 1, "birth-api"); err != nil {
			return "", err
		}
		return "a birth dated an hour ahead", e.exec(`UPDATE birth_registry SET born_at = now() + interval '1 hour'
			WHERE id = (SELECT max(id) FROM birth_registry)`)
	}},
	{"unmapped_changelog", func(e *env, r *rand.Rand) (string, error) {
		// A row no mapping rule matches: reported, and it changes no verdict.
		return "an unmapped changelog row", e.changelog("widget", fmt.Sprint("w", r.Uint32()), "frobnicate", "registry-sync")
	}},
	{"register", func(e *env, r *rand.Rand) (string, error) {
		class, coll, code, err := e.object(r, "true")
		if err != nil {
			return "", err
		}
		return "object " + coll + ":" + code + " re-registered", e.changelog(class, code, "register", "registry-sync")
	}},
	{"source_changed", func(e *env, r *rand.Rand) (string, error) {
		class, coll, code, err := e.object(r, "true")
		if err != nil {
			return "", err
		}
		if err := e.exec(`UPDATE birth_registry SET source_system = 'registry-sync' WHERE collection_name = $1 AND entity_code = $2`, coll, code); err != nil {
			return "", err
		}
		return "source of " + coll + ":" + code + " changed", e.changelog(class, code, "source_changed", "registry-sync")
	}},
	{"count_changed", func(e *env, r *rand.Rand) (string, error) {
		colls, err := e.strings(`SELECT collection_name FROM collection_registry ORDER BY 1`)
		if err != nil {
			return "", err
		}
		coll := pick(r, colls)
		return "count of " + coll + " changed", e.changelog("collection", coll, "count_changed", "registry-sync")
	}},
	{"axis", func(e *env, r *rand.Rand) (string, error) {
		class, _, _, err := e.object(r, "true")
		if err != nil {
			return "", err
		}
		e.seq++
		code := fmt.Sprintf("pivot-d%d-%d", e.seq, r.IntN(1e6))
		if err := e.exec(`INSERT INTO pivot_definitions (pivot_code, axis_family, entity_type) VALUES ($1, $2, $3)`,
			code, pick(r, []string{"aa-family", "zz-family"}), class); err != nil {
			return "", err
		}
		if err := e.changelog("pivot", code, "create", "registry-sync"); err != nil {
			return "", err
		}
		v, err := e.activate()
		return "axis " + code + " on " + class + "; ruleset " + v + " activated", err
	}},
	{"policy", func(e *env, r *rand.Rand) (string, error) {
		laws, err := e.strings(`SELECT law_code FROM law_jurisdiction ORDER BY 1`)
		if err != nil || len(laws) == 0 {
			return "", fmt.Errorf("no law_jurisdiction row (%v)", err)
		}
		e.seq++
		id := fmt.Sprintf("M-D%d-%d", e.seq, r.IntN(1e6))
		if err := e.exec(`INSERT INTO measurement_registry (measurement_id, law_code, method, source_query, target_query, severity)
			VALUES ($1, $2, 1, 'select 1', 'select 1', 'high')`, id, pick(r, laws)); err != nil {
			return "", err
		}
		if err := e.changelog("measurement", id, "create", "registry-sync"); err != nil {
			return "", err
		}
		v, err := e.activate()
		return "rule " + id + " added; ruleset " + v + " activated", err
	}},
	{"ttl_expiry", func(e *env, r *rand.Rand) (string, error) {
		// The clock passing stale_after, without waiting a TTL: the rows' stale_after is moved to now.
		keys, err := e.strings(`SELECT group_key FROM governance_candidate_state ORDER BY group_key`)
		if err != nil {
			return "", err
		}
		n := 1 + r.IntN(5)
		var chosen []string
		for range n {
			chosen = append(chosen, pick(r, keys))
		}
		return fmt.Sprintf("%d rows past stale_after", n), e.exec(`UPDATE governance_candidate_state SET stale_after = now()
			WHERE group_key = ANY($1)`, chosen)
	}},
	{"poison", func(e *env, r *rand.Rand) (string, error) {
		if err := e.changelog("no_such_registry_word", "x", "update", "registry-sync"); err != nil {
			return "", err
		}
		return "a changelog row naming nothing", e.exec(`INSERT INTO registry_changelog (action) VALUES ('update')`)
	}},
}

// silentRetire retires an object with no changelog row (a change the tail cannot see), then runs the full audit
// that must catch it: an object that shares its group with others, or the last member of its group.
// With cached, the gate's view is asked about the object first, so it holds the object's birth when the source
// changes under it.
func silentRetire(last, cached bool) func(e *env, r *rand.Rand) (string, error) {
	return func(e *env, r *rand.Rand) (string, error) {
		members := `(SELECT count(*) FROM birth_registry o WHERE o.entity_type = birth_registry.entity_type
			AND o.collection_name = birth_registry.collection_name AND o.status = birth_registry.status)`
		where := "status = 'active' AND " + members + " > 1"
		if last {
			where = "status = 'active' AND " + members + ` = 1 AND NOT EXISTS (SELECT 1 FROM birth_registry c
				WHERE c.collection_name = birth_registry.collection_name AND c.parent_code = birth_registry.entity_code)`
		}
		_, coll, code, err := e.object(r, where)
		if err != nil {
			return "", err
		}
		if cached {
			if err := e.view.CatchUp(e.ctx); err != nil {
				return "", err
			}
			if res := e.view.Decide(e.ctx, coll+":"+code, gcos.ActionWrite); res.Source != gate.SourceView {
				return "", fmt.Errorf("the view did not answer for %s:%s (source %q): its birth is not cached", coll, code, res.Source)
			}
		}
		if err := e.exec(`UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, coll, code); err != nil {
			return "", err
		}
		if _, err := scan.New(e.store).FullAudit(e.ctx, nil); err != nil {
			return "", err
		}
		e.touched = append(e.touched, coll+":"+code)
		return "silent retire of " + coll + ":" + code + ", then a full audit", nil
	}
}

// activate proposes the ruleset of the registries as they are and activates it.
// The registries may have returned to the content of a superseded version (a setting flipped twice), which is
// history and cannot be activated again: a new measurement makes the content new, as an operator would.
func (e *env) activate() (string, error) {
	for attempt := 0; ; attempt++ {
		rs, _, err := e.store.ComputeRuleset(e.ctx, "proposer")
		if err != nil {
			return "", err
		}
		if rs.Status == "superseded" && attempt == 0 {
			e.seq++
			if err := e.exec(`INSERT INTO measurement_registry (measurement_id, law_code, method, source_query, target_query, severity)
				SELECT $1, min(law_code), 1, 'select 1', 'select 1', 'low' FROM law_jurisdiction`, fmt.Sprintf("M-AGAIN-%d", e.seq)); err != nil {
				return "", err
			}
			continue
		}
		if _, err := e.store.ActivateRuleset(e.ctx, rs.Version, "APR-R", "approver"); err != nil {
			return "", err
		}
		return rs.Version, nil
	}
}

// objectException grants an approved exception on one relevant object, pinned to its fingerprint.
func (e *env) objectException(r *rand.Rand, life string) (id, obj string, err error) {
	class, coll, code, err := e.object(r, "status = 'active'")
	if err != nil {
		return "", "", err
	}
	fp, err := e.fingerprint(coll, code)
	if err != nil {
		return "", "", err
	}
	scopes, err := e.strings(`SELECT scope_code FROM governance_responsibility_scope ORDER BY 1`)
	if err != nil {
		return "", "", err
	}
	e.seq++
	e.touched = append(e.touched, coll+":"+code)
	id = fmt.Sprintf("EXC-O-%d-%d", e.seq, r.IntN(1e6))
	if err := e.exec(`INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, entity_code,
		approval_ref, expires_at, fingerprint) VALUES ($1, $2, $3, $4, $5, 'APR-X', now() + $6::interval, $7)`,
		id, pick(r, scopes), class, coll, code, life, fp); err != nil {
		return "", "", err
	}
	return id, coll + ":" + code, e.changelog("exception", id, "create", "registry-sync")
}

func triggerNamed(name string) trigger {
	for _, tr := range triggers {
		if tr.name == name {
			return tr
		}
	}
	panic("no trigger " + name)
}

// unexpected returns the mismatches no known divergence of the triggers run so far explains.
func unexpected(rep oracle.Report, ran []string) []oracle.Mismatch {
	var out []oracle.Mismatch
	for _, m := range rep.Mismatches {
		known := slices.ContainsFunc(knownDivergences, func(k knownDivergence) bool {
			return k.after(ran) && k.explains(m)
		})
		if !known {
			out = append(out, m)
		}
	}
	return out
}

func TestDifferential(t *testing.T) {
	if testing.Short() {
		t.Skip("the differential test builds a world")
	}
	names := make([]string, len(triggers))
	for i, tr := range triggers {
		names[i] = tr.name
	}
	built := builtWorld(t)
	rapid.Check(t, func(rt *rapid.T) {
		e := newEnv(t, built)
		defer func() { _ = pgtest.Drop(e.pool) }()
		var ran []string
		steps := rapid.IntRange(1, *maxSteps).Draw(rt, "steps")
		for i := range steps {
			name := rapid.SampledFrom(names).Draw(rt, fmt.Sprintf("trigger %d", i))
			seed := rapid.Uint64().Draw(rt, fmt.Sprintf("seed %d", i))
			what, err := triggerNamed(name).apply(e, rand.New(rand.NewPCG(seed, 1)))
			if err != nil {
				rt.Fatalf("step %d (%s): %v", i, name, err)
			}
			rt.Logf("step %d: %s: %s", i, name, what)
			ran = append(ran, name)
			if err := e.settle(); err != nil {
				rt.Fatalf("step %d (%s): settle: %v", i, name, err)
			}
			sample := stepSample
			if i == steps-1 {
				sample = finalSample
			}
			rep, err := oracle.Verify(e.ctx, e.store, oracle.VerifyOptions{Sample: sample, Seed: seed, Also: e.touched, Gate: e.gate, View: e.view})
			if err != nil {
				rt.Fatalf("step %d (%s): verify: %v", i, name, err)
			}
			if bad := unexpected(rep, ran); len(bad) > 0 {
				rt.Fatalf("after step %d (%s) the incremental state differs from the reference in %d places:\n%s",
					i, name, len(bad), describe(bad, 25))
			}
		}
	})
}

func describe(ms []oracle.Mismatch, limit int) string {
	var b strings.Builder
	for i, m := range ms {
		if i == limit {
			fmt.Fprintf(&b, "  … and %d more\n", len(ms)-limit)
			break
		}
		b.WriteString("  " + m.String() + "\n")
	}
	return b.String()
}

// TestEveryTrigger runs each trigger alone on a fresh copy of the world and checks the known-divergence table
// both ways: every mismatch is explained by an entry of that trigger (a trigger with none must match exactly), and
// every entry still happens (a fix makes its entry fail here: remove it). The gate is asked about every object with
// a row, every object the trigger changed and a sample.
func TestEveryTrigger(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a world")
	}
	built := builtWorld(t)
	rescanned := 0
	for _, tr := range triggers {
		t.Run(tr.name, func(t *testing.T) {
			e := newEnv(t, built)
			defer func() { _ = pgtest.Drop(e.pool) }()
			what, err := tr.apply(e, rand.New(rand.NewPCG(3, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := e.settle(); err != nil {
				t.Fatal(err)
			}
			rescanned += e.rescanned
			rep, err := oracle.Verify(e.ctx, e.store, oracle.VerifyOptions{Sample: everySample, Seed: 1, Also: e.touched, Gate: e.gate, View: e.view})
			if err != nil {
				t.Fatal(err)
			}
			if bad := unexpected(rep, []string{tr.name}); len(bad) > 0 {
				t.Errorf("%s: %d mismatches no known divergence explains:\n%s", what, len(bad), describe(bad, 25))
			}
			if rep.ViewChecks < rep.GateChecks/2 {
				t.Errorf("%s: the view answered %d of %d gate questions itself: it was hardly compared", what, rep.ViewChecks, rep.GateChecks)
			}
			if rep.BatchChecks < 2*rep.GateChecks {
				t.Errorf("%s: %d batch answers compared for %d questions, want each asked in a batch on the database and through the view", what, rep.BatchChecks, rep.GateChecks)
			}
			for _, k := range knownDivergences {
				if slices.Contains(k.triggers, tr.name) && !slices.ContainsFunc(rep.Mismatches, k.explains) {
					t.Errorf("%s: known divergence %s.%s (%s) no longer happens: remove it from knownDivergences",
						what, k.kind, k.field, k.why)
				}
			}
		})
	}
	t.Logf("the gate answered %d questions mid-flight on verdicts it re-scanned itself", rescanned)
}

// TestSequencesTheSoakFound replays sequences the soak once failed on, each step checked as TestDifferential
// checks it.
func TestSequencesTheSoakFound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a world")
	}
	type step struct {
		trigger string
		seed    uint64
	}
	built := builtWorld(t)
	for _, c := range []struct {
		name  string
		steps []step
	}{
		// A quarantined birth's object row, carried dirty into a new ruleset, stayed stale while its finding was open.
		{"quarantine across a ruleset activation", []step{{"untrusted_birth", 0x1e5deb76}, {"coverage", 0xb7aa29},
			{"merge", 0x112147bfbdbde}, {"policy", 0x79}}},
		// A quarantined object's row, held by its finding, kept its old group when its object was retired.
		{"held object row follows its object", []step{{"untrusted_birth", 0x141646}, {"ttl_expiry", 0xdf4263},
			{"retire_object_row", 0x1}}},
		// Children born after a birth dated an hour ahead sort ahead of the cursor: a replay starts behind it.
		{"replay after a birth dated ahead", []step{{"future_birth", 0xae997a64b}, {"children", 0x8},
			{"replay", 0x2bc22f5ffa79b}}},
		// A quarantined birth's finding resolved by hand: the object row it held lapses with it.
		{"a held object row lapses when its finding is resolved by hand", []step{{"untrusted_birth", 0x1e5deb76},
			{"resolve_by_hand", 0x1}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, built)
			defer func() { _ = pgtest.Drop(e.pool) }()
			var ran []string
			for i, s := range c.steps {
				what, err := triggerNamed(s.trigger).apply(e, rand.New(rand.NewPCG(s.seed, 1)))
				if err != nil {
					t.Fatalf("step %d (%s): %v", i, s.trigger, err)
				}
				ran = append(ran, s.trigger)
				t.Logf("step %d: %s", i, what)
				if err := e.settle(); err != nil {
					t.Fatalf("step %d (%s): settle: %v", i, s.trigger, err)
				}
				rep, err := oracle.Verify(e.ctx, e.store, oracle.VerifyOptions{Sample: everySample, Seed: s.seed, Also: e.touched, Gate: e.gate, View: e.view})
				if err != nil {
					t.Fatal(err)
				}
				if bad := unexpected(rep, ran); len(bad) > 0 {
					t.Fatalf("after step %d (%s: %s) the incremental state differs from the reference in %d places:\n%s",
						i, s.trigger, what, len(bad), describe(bad, 25))
				}
			}
		})
	}
}

// TestBirthsInFlightKeepTheGate proves churn elsewhere blocks no write (SPEC §12) against the reference: births
// into existing groups are handed off but not scanned, so their groups are dirty for membership alone, and the
// gate's answers (the database's and the view's) for every object with a row, the newborns and the objects of
// those groups still equal the from-scratch evaluation. Group rows differ meanwhile (their counts await the scan);
// the gate must not.
func TestBirthsInFlightKeepTheGate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a world")
	}
	e := newEnv(t, builtWorld(t))
	defer func() { _ = pgtest.Drop(e.pool) }()
	bases, err := e.strings(`SELECT DISTINCT object_class || '|' || source_registry || '|' || lifecycle_status FROM v_candidate_effective
		WHERE clean AND lifecycle_status = 'active' AND object_class IS NOT NULL ORDER BY 1`)
	if err != nil || len(bases) == 0 {
		t.Fatalf("no clean base to be born into (%v)", err)
	}
	var also []string
	for i, base := range bases {
		p := strings.SplitN(base, "|", 3)
		code := fmt.Sprintf("inflight-%d", i)
		if err := e.exec(`INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ($1, $2, $3, $4, 'birth-api', 'differential')`, code, p[1], p[0], p[2]); err != nil {
			t.Fatal(err)
		}
		also = append(also, p[1]+":"+code)
		older, err := e.strings(`SELECT collection_name || ':' || entity_code FROM birth_registry
			WHERE (entity_type, collection_name, status) = ($1, $2, $3) AND parent_code IS NULL ORDER BY id LIMIT 2`, p[0], p[1], p[2])
		if err != nil {
			t.Fatal(err)
		}
		also = append(also, older...)
	}
	// Intake only, until the births' tail has passed every row: the dirty marks are the births', nothing is scanned.
	reasons := e.intakeOnly(t, "birth_registry")
	if !slices.Equal(reasons, []string{"handoff:" + string(gcos.ChangeObjectBorn)}) {
		t.Fatalf("the births left groups dirty for %q, want for membership alone", reasons)
	}
	rep, err := oracle.Verify(e.ctx, e.store, oracle.VerifyOptions{Sample: everySample, Seed: 5, Also: also, Gate: e.gate, View: e.view})
	if err != nil {
		t.Fatal(err)
	}
	var gate []oracle.Mismatch
	for _, m := range rep.Mismatches {
		if m.Kind == "gate" || m.Kind == "gate_view" || m.Kind == "gate_batch" {
			gate = append(gate, m)
		}
	}
	if len(gate) > 0 {
		t.Fatalf("with %d births in flight the gate differs from the reference in %d answers:\n%s", len(bases), len(gate), describe(gate, 25))
	}
	if rep.ViewChecks < rep.GateChecks/2 {
		t.Fatalf("the view answered %d of %d gate questions itself", rep.ViewChecks, rep.GateChecks)
	}
	t.Logf("%d births in flight over %d groups' bases: %d gate answers equal the reference's (%d by the view too)",
		len(bases), len(bases), rep.GateChecks, rep.ViewChecks)
}

// intakeOnly runs the intake, and nothing else, until the tail of source has passed every row of it (polling with a
// generous deadline), and returns the reasons the groups under the current ruleset are dirty for.
func (e *env) intakeOnly(t *testing.T, source string) []string {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		wait.Pass(e.ctx, 30*time.Millisecond) // past the tail's horizon guard
		if _, err := e.intake.Once(e.ctx); err != nil {
			t.Fatal(err)
		}
		var swept bool
		if err := e.pool.QueryRow(e.ctx, `SELECT bool_and(swept_id >= (SELECT max(id) FROM `+source+`))
			FROM gov_worker_cursor WHERE source = $1`, source).Scan(&swept); err != nil {
			t.Fatal(err)
		}
		if swept {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the intake never passed the rows of %s", source)
		}
	}
	reasons, err := e.strings(`SELECT DISTINCT coalesce(dirty_reason, '') FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
		WHERE c.dirty ORDER BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	return reasons
}

// TestRetiresInFlightKeepTheGate is TestBirthsInFlightKeepTheGate for retirements: objects retired into a group
// that already exists are handed off but not scanned, so the groups they left and joined are dirty for membership
// alone, and the gate's answers (the database's and the view's) for the retired objects, their old siblings and
// their new ones still equal the from-scratch evaluation.
func TestRetiresInFlightKeepTheGate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a world")
	}
	e := newEnv(t, builtWorld(t))
	defer func() { _ = pgtest.Drop(e.pool) }()
	// One object per (class, collection): an anchor with no children and no object row, not the last active member
	// of its group, whose class already has retired members (the group it joins exists and has a verdict).
	picks, err := e.strings(`SELECT DISTINCT ON (b.entity_type, b.collection_name) b.entity_type || '|' || b.collection_name || '|' || b.entity_code
		FROM birth_registry b
		WHERE b.status = 'active' AND b.parent_code IS NULL
		  AND NOT EXISTS (SELECT 1 FROM birth_registry c WHERE c.collection_name = b.collection_name AND c.parent_code = b.entity_code)
		  AND NOT EXISTS (SELECT 1 FROM governance_candidate_object o WHERE o.object_ref = b.collection_name || ':' || b.entity_code)
		  AND EXISTS (SELECT 1 FROM birth_registry o WHERE (o.entity_type, o.collection_name, o.status) = (b.entity_type, b.collection_name, 'retired'))
		  AND (SELECT count(*) FROM birth_registry o WHERE (o.entity_type, o.collection_name, o.status) = (b.entity_type, b.collection_name, 'active')) > 1
		ORDER BY b.entity_type, b.collection_name, b.id`)
	if err != nil || len(picks) == 0 {
		t.Fatalf("no object to retire into an existing group (%v)", err)
	}
	var also []string
	for _, p := range picks {
		f := strings.SplitN(p, "|", 3)
		class, coll, code := f[0], f[1], f[2]
		if err := e.exec(`UPDATE birth_registry SET status = 'retired' WHERE collection_name = $1 AND entity_code = $2`, coll, code); err != nil {
			t.Fatal(err)
		}
		if err := e.changelog(class, code, "retire", "registry-sync"); err != nil {
			t.Fatal(err)
		}
		siblings, err := e.strings(`(SELECT collection_name || ':' || entity_code FROM birth_registry
			WHERE (entity_type, collection_name, status) = ($1, $2, 'active') AND parent_code IS NULL ORDER BY id LIMIT 2)
			UNION ALL (SELECT collection_name || ':' || entity_code FROM birth_registry
			WHERE (entity_type, collection_name, status) = ($1, $2, 'retired') AND entity_code <> $3 AND parent_code IS NULL ORDER BY id LIMIT 1)`,
			class, coll, code)
		if err != nil {
			t.Fatal(err)
		}
		also = append(append(also, coll+":"+code), siblings...)
	}
	// Intake only, until the change ledger's tail has passed every row: nothing is scanned.
	reasons := e.intakeOnly(t, "registry_changelog")
	if !slices.Contains(reasons, "handoff:"+string(gcos.ChangeObjectRetired)) || slices.ContainsFunc(reasons, func(r string) bool {
		return !gcos.MembershipOnly(&r)
	}) {
		t.Fatalf("the retirements left groups dirty for %q, want for membership alone", reasons)
	}
	rep, err := oracle.Verify(e.ctx, e.store, oracle.VerifyOptions{Sample: everySample, Seed: 9, Also: also, Gate: e.gate, View: e.view})
	if err != nil {
		t.Fatal(err)
	}
	var gate []oracle.Mismatch
	for _, m := range rep.Mismatches {
		if m.Kind == "gate" || m.Kind == "gate_view" || m.Kind == "gate_batch" {
			gate = append(gate, m)
		}
	}
	if len(gate) > 0 {
		t.Fatalf("with %d retirements in flight the gate differs from the reference in %d answers:\n%s", len(picks), len(gate), describe(gate, 25))
	}
	t.Logf("%d retirements in flight: %d gate answers equal the reference's (%d by the view too)", len(picks), rep.GateChecks, rep.ViewChecks)
}

// TestStaleHighRiskAnsweredByTheGate proves the gate's synchronous re-scan (SPEC §12) against the reference: the
// groups of high-risk objects allowed at rest are left stale — half dirty for an axis change, half past
// stale_after — with nothing scanned, and the gate, asked about each object, re-scans its groups itself and answers
// as the from-scratch evaluation does. What those re-scans committed must then equal the reference everywhere.
func TestStaleHighRiskAnsweredByTheGate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a world")
	}
	e := newEnv(t, builtWorld(t))
	defer func() { _ = pgtest.Drop(e.pool) }()
	members, err := e.strings(`SELECT o FROM (
		SELECT DISTINCT ON (g.object_class, g.source_registry, g.lifecycle_status) g.object_class, g.source_registry,
		       g.lifecycle_status, b.collection_name || ':' || b.entity_code AS o
		FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
		JOIN governance_group g USING (group_key)
		JOIN birth_registry b ON (b.entity_type, b.collection_name, b.status) = (g.object_class, g.source_registry, g.lifecycle_status)
		WHERE NOT (c.risk_class = ANY($1)) AND b.parent_code IS NULL AND g.retired_at IS NULL
		ORDER BY g.object_class, g.source_registry, g.lifecycle_status, b.id) x ORDER BY o`, e.store.Config().Gate.LowRiskClasses)
	if err != nil {
		t.Fatal(err)
	}
	var objects, dirty, expired []string
	for _, o := range members {
		res := e.gate.Decide(e.ctx, o, gcos.ActionWrite)
		if res.Decision != gcos.GateAllow {
			continue
		}
		objects = append(objects, o)
		for _, c := range res.Consulted {
			if c.Source == gcos.GateSourceGroup {
				if len(objects)%2 == 0 {
					dirty = append(dirty, c.Key)
				} else {
					expired = append(expired, c.Key)
				}
			}
		}
	}
	if len(objects) < 2 {
		t.Fatalf("%d high-risk objects allowed at rest among %d bases: nothing to prove on", len(objects), len(members))
	}
	if _, err := e.store.MarkDirty(e.ctx, dirty, gcos.DirtyAxis); err != nil {
		t.Fatal(err)
	}
	if err := e.exec(`UPDATE governance_candidate_state SET stale_after = now() WHERE group_key = ANY($1)`, expired); err != nil {
		t.Fatal(err)
	}
	if err := e.view.CatchUp(e.ctx); err != nil { // the view sees the marks (its bound is long here)
		t.Fatal(err)
	}
	// The marks changed no substrate: the reference still allows each object, as the gate did at rest (Verify
	// below proves the reference's answer once more, on the state the gate's re-scans left).
	for _, o := range objects {
		if res := e.gate.Decide(e.ctx, o, gcos.ActionWrite); res.Decision != gcos.GateBlock {
			t.Fatalf("%s with its groups stale and no re-scan: %s (%v), want block", o, res.Decision, res.Reasons)
		}
		if res := e.gate.Gate(e.ctx, o, gcos.ActionWrite); !res.Rescanned || res.Decision != gcos.GateAllow {
			t.Errorf("%s: the gate answered %s (rescanned %v: %v), want allow from its re-scan", o, res.Decision, res.Rescanned, first(res.Reasons))
		}
	}
	rep, err := oracle.Verify(e.ctx, e.store, oracle.VerifyOptions{Sample: everySample, Seed: 7, Also: objects, Gate: e.gate, View: e.view})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Mismatches) > 0 {
		t.Fatalf("after the gate's re-scans the state differs from the reference in %d places:\n%s", len(rep.Mismatches), describe(rep.Mismatches, 25))
	}
	t.Logf("%d high-risk objects over %d stale groups answered from the gate's own re-scans, as the reference does", len(objects), len(dirty)+len(expired))
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// TestOwnerMoveSeenFirstByABirth: an owner moves, and before its change row is handed off a birth into a base it
// owns names the base's new group (the intake records it, counting the newborn alone). A tick then claims the new group while
// another transaction holds the old one, as a concurrent scan would. The members of the base are never counted
// by two live groups (every scope's ledger closes), and once the change row is handed off the state equals the
// reference.
func TestOwnerMoveSeenFirstByABirth(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a world")
	}
	e := newEnv(t, builtWorld(t))
	defer func() { _ = pgtest.Drop(e.pool) }()
	var old, class, coll, owner string
	var scope *string
	if err := e.pool.QueryRow(e.ctx, `SELECT g.group_key, g.object_class, g.source_registry, g.owner_scope, g.scope
		FROM governance_group g
		WHERE g.retired_at IS NULL AND g.lifecycle_status = 'active' AND g.member_count > 0
		  AND EXISTS (SELECT 1 FROM governance_object_ownership o WHERE o.status = 'active' AND o.owner_ref = g.owner_scope)
		ORDER BY g.group_key LIMIT 1`).Scan(&old, &class, &coll, &owner, &scope); err != nil {
		t.Fatalf("no owned group: %v", err)
	}
	ids, err := e.strings(`UPDATE governance_object_ownership SET owner_ref = 'team-moved-first'
		WHERE status = 'active' AND owner_ref = $1 RETURNING id::text`, owner)
	if err != nil || len(ids) == 0 {
		t.Fatalf("move owner %s: %v", owner, err)
	}
	if err := e.exec(`INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('owner-moved-first-1', $1, $2, 'active', 'birth-api', 'differential')`, coll, class); err != nil {
		t.Fatal(err)
	}
	e.intakeOnly(t, "birth_registry")
	live := func() []string {
		keys, err := e.strings(`SELECT group_key || ' members=' || member_count FROM governance_group
			WHERE retired_at IS NULL AND (object_class, source_registry, lifecycle_status) = ($1, $2, 'active')
			  AND scope IS NOT DISTINCT FROM $3 ORDER BY group_key`, class, coll, scope)
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if got := live(); len(got) != 2 {
		t.Fatalf("the birth did not record the base's new group beside %s: live groups %v", old, got)
	}

	held, err := e.pool.Begin(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = held.Rollback(e.ctx) }()
	if _, err := held.Exec(e.ctx, `SELECT 1 FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
		WHERE c.group_key = $1 FOR UPDATE OF c`, old); err != nil {
		t.Fatal(err)
	}
	if _, err := e.scans.Once(e.ctx, postgres.ModeEvent); err != nil {
		t.Fatalf("scan while the old group is held: %v", err)
	}
	ledger, err := e.gate.Invariant(e.ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if !ledger.Closes {
		t.Fatalf("a tick counted the base's members in its new group while the old one held them: live groups %v, ledgers %+v",
			live(), ledger.Ledgers)
	}
	if err := held.Rollback(e.ctx); err != nil {
		t.Fatal(err)
	}

	for _, id := range ids {
		if err := e.changelog("ownership", id, "update", "registry-sync"); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.settle(); err != nil {
		t.Fatal(err)
	}
	if got := live(); len(got) != 1 || strings.HasPrefix(got[0], old) {
		t.Fatalf("after the owner's change row: live groups %v, want one, not %s", got, old)
	}
	rep, err := oracle.Verify(e.ctx, e.store, oracle.VerifyOptions{Sample: everySample, Seed: 7, Also: []string{coll + ":owner-moved-first-1"}, Gate: e.gate, View: e.view})
	if err != nil {
		t.Fatal(err)
	}
	if bad := unexpected(rep, []string{"owner_moved"}); len(bad) > 0 {
		t.Fatalf("the state differs from the reference in %d places:\n%s", len(bad), describe(bad, 25))
	}
}
