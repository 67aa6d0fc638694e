package postgres

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The gate's in-process verdict view (SPEC §12 freshness). It holds what the gate judges an object on — the groups,
// their candidate rows, the object rows and the coverage records under the current ruleset, the rulesets' states,
// the snapshots and exceptions they reference, and the registries' names — loaded in one consistent read and kept
// current from the change feed (migration 014) that every write to those tables notes in its own transaction.
//
// The bound is enforced, not hoped for: each catch-up is a read of the database, and the view answers only while
// its last catch-up began at most gate.max_staleness ago (the monotonic clock). Every commit before that instant is
// in the view; a decision that cannot be answered within the bound reads through to the database (and blocks when
// that fails). Notifications only wake the catch-up early: a lost listener costs latency, never a wrong answer.
//
// Birth rows are the source's, not GCOS's: the view caches an object's birth (and its parent's) when first asked,
// and drops it when the intake hands off a change-ledger row naming it (a 'birth' note in the feed, written in the
// handoff's transaction) or when it is older than gate.view_birth_max_age, the bound on a source update that
// bypasses the change ledger.

// The change feed's kinds (migration 014): the table a note's key is in, and birth for a birth row a change-ledger
// row named.
const (
	feedGroup    = "group"
	feedState    = "state"
	feedObject   = "object"
	feedCoverage = "coverage"
	feedRuleset  = "ruleset"
	feedBirth    = "birth"
)

// FeedKinds are the change feed's kinds.
var FeedKinds = []string{feedGroup, feedState, feedObject, feedCoverage, feedRuleset, feedBirth}

// Gate answer sources.
const (
	SourceView     = "view"
	SourceDatabase = "database"
)

// VerdictView is the gate's in-process view; Run keeps it current. The zero value is not usable: see NewVerdictView.
type VerdictView struct {
	s            *Store
	maxStale     time.Duration
	refresh      time.Duration
	birthMaxAge  time.Duration
	feedRetained time.Duration

	catchingUp sync.Mutex // one catch-up at a time
	mu         sync.RWMutex
	state      *viewState
	asOf       time.Time     // the local (monotonic) instant the last catch-up's read began: its snapshot is younger
	dbAsOf     time.Time     // the database clock at that read
	offset     time.Duration // database clock minus local clock, measured at that read
	snapshot   string        // pg_current_snapshot() of that read: the next catch-up reads what committed since

	objects     sync.Map // ObjectRef → *objectEntry: what the view remembers of an object asked about
	objectCount atomic.Int64
	maxObjects  int           // objects remembered; past it they are all forgotten
	birthGen    atomic.Uint64 // bumped whenever a catch-up drops births: a birth read across it is not cached
	wake        chan struct{}
	samples     []horizonSample // (time, xmin) samples the feed is pruned by
	lastPrune   time.Time

	answered, readThrough, reloads atomic.Int64
}

// NewVerdictView builds a view over s's database with s's configuration (gate.max_staleness and friends).
func NewVerdictView(s *Store) *VerdictView {
	g := s.cfg.Gate
	return &VerdictView{s: s, maxStale: g.MaxStaleness.Duration(), refresh: g.ViewRefresh.Duration(),
		birthMaxAge: g.ViewBirthMaxAge.Duration(), feedRetained: g.FeedRetention.Duration(), maxObjects: g.ViewObjects,
		wake: make(chan struct{}, 1)}
}

// viewState is what one catch-up leaves: the current ruleset's candidate state, keyed as the gate looks it up.
type viewState struct {
	version       string // the current ruleset (v_current_ruleset); "" when none
	versionStatus string
	active        string // the active ruleset ("" when none)
	groups        map[string]viewGroup
	byBase        map[BirthBase][]string // a base's groups that are not retired, by scope then key
	states        map[string]gcos.CandidateRow
	objects       map[string]viewObject // active object rows by object_ref
	coverage      map[string]gcos.CoverageRecord
	snapshots     map[int64]time.Time
	exceptions    map[string]*gcos.ExceptionRow // the registry's current row (nil: gone)
	collections   map[string]bool
	classes       map[string]bool
	// objectOfCandidate maps an object row's candidate key to its object_ref (its coverage is keyed by the former).
	objectOfCandidate map[string]string

	// Stamps of what changed, from one clock (a remembered answer is valid while its stamps are): gen for what every
	// answer rests on (rulesets, snapshots, exceptions, registries), baseGen per base, objectGen per object row.
	clock, gen uint64
	baseGen    map[BirthBase]uint64
	objectGen  map[ObjectRef]uint64
}

type viewGroup struct {
	base    BirthBase
	scope   string
	retired bool
}

type viewObject struct {
	group string
	row   gcos.CandidateRow // GroupKey holds the object's candidate key
}

// birthRaw is one birth row as the source holds it, with its fingerprint lanes and when it was read.
type birthRaw struct {
	class, coll, status string
	parent              *string
	h0, h1              int64
	readAt              time.Time
}

type horizonSample struct {
	at   time.Time
	xmin string
}

// ViewStats counts the view's answers and read-throughs.
type ViewStats struct {
	Answered    int64     `json:"answered"`
	ReadThrough int64     `json:"read_through"`
	Reloads     int64     `json:"reloads"`
	AsOf        time.Time `json:"as_of"`
	Fresh       bool      `json:"fresh"`
}

// Stats reports the view's counters and whether it may answer now.
func (v *VerdictView) Stats() ViewStats {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return ViewStats{Answered: v.answered.Load(), ReadThrough: v.readThrough.Load(), Reloads: v.reloads.Load(),
		AsOf: v.dbAsOf, Fresh: v.freshLocked()}
}

func (v *VerdictView) freshLocked() bool {
	return v.state != nil && time.Since(v.asOf) <= v.maxStale
}

// Run loads the view and keeps it current until ctx ends. A failed catch-up is logged and retried: meanwhile the
// view ages past its bound and the gate reads through.
func (v *VerdictView) Run(ctx context.Context) error {
	go v.listen(ctx)
	tick := time.NewTicker(v.refresh)
	defer tick.Stop()
	var failing bool
	for {
		err := v.CatchUp(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !failing {
			v.s.logger.Warn("gate view: catch up (the gate reads through until it recovers)", "err", err)
		} else if err == nil && failing {
			v.s.logger.Info("gate view: caught up again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-v.wake:
			// A burst of notifications is one catch-up: give the writers a moment to finish.
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(v.refresh / 4):
			}
		}
	}
}

// listen wakes the catch-up on the feed's notifications, reconnecting when the connection is lost.
func (v *VerdictView) listen(ctx context.Context) {
	for ctx.Err() == nil {
		err := v.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		v.s.logger.Debug("gate view: listener lost (polling goes on)", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

func (v *VerdictView) listenOnce(ctx context.Context) error {
	cfg := v.s.pool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "gcos-gate-view"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `LISTEN gcos_change_feed`); err != nil {
		return err
	}
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		select {
		case v.wake <- struct{}{}:
		default:
		}
	}
}

// viewHeaderSQL opens a catch-up: its snapshot (what the next one starts from), the clock, and whether the feed
// was pruned past the previous snapshot (then notes may be gone and everything is reloaded).
const viewHeaderSQL = `SELECT pg_current_snapshot()::text, pg_snapshot_xmin(pg_current_snapshot())::text, clock_timestamp(),
	coalesce($1::pg_snapshot IS NULL OR pg_snapshot_xmin($1::pg_snapshot) < (SELECT pruned_below FROM gcos_change_feed_horizon), true)`

// viewFeedSQL: the notes of the transactions that committed since the previous snapshot.
const viewFeedSQL = `SELECT DISTINCT kind, key FROM gcos_change_feed
	WHERE xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)`

// reloadAbove is how many changed keys a catch-up re-reads one by one; past it, it reloads everything.
const reloadAbove = 20_000

// CatchUp brings the view up to the database's present in one repeatable-read transaction.
func (v *VerdictView) CatchUp(ctx context.Context) error {
	v.catchingUp.Lock()
	defer v.catchingUp.Unlock()
	began := time.Now()
	v.mu.RLock()
	prev, cur := v.snapshot, v.state
	v.mu.RUnlock()
	var prevArg *string
	if cur != nil {
		prevArg = &prev
	}
	var snapshot, xmin string
	var dbNow, read time.Time
	var reload bool
	var next *viewState
	var changed map[string][]string
	d := newViewDelta()
	err := pgx.BeginTxFunc(ctx, v.s.gatePool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, viewHeaderSQL, prevArg).Scan(&snapshot, &xmin, &dbNow, &reload); err != nil {
			return fmt.Errorf("open: %w", err)
		}
		read = time.Now()
		if !reload {
			var err error
			if changed, err = readFeed(ctx, tx, prev); err != nil {
				return err
			}
			n := 0
			for _, keys := range changed {
				n += len(keys)
			}
			reload = len(changed[feedRuleset]) > 0 || n > reloadAbove
		}
		if reload {
			var err error
			var clock uint64
			if cur != nil {
				clock = cur.clock
			}
			next, err = loadViewState(ctx, tx, clock)
			return err
		}
		if err := d.read(ctx, tx, cur.version, changed); err != nil {
			return err
		}
		snaps, exceptions := map[int64]bool{}, map[string]bool{}
		v.mu.RLock()
		cur.referenced(snaps, exceptions)
		v.mu.RUnlock()
		return d.readReferenced(ctx, tx, snaps, exceptions)
	})
	if err != nil {
		return fmt.Errorf("gate view: %w", err)
	}
	if len(changed[feedBirth]) > 0 || reload {
		v.birthGen.Add(1)
		if reload {
			v.objects.Clear()
			v.objectCount.Store(0)
		}
		for _, k := range changed[feedBirth] {
			if ref, err := ParseObjectRef(k); err == nil {
				v.objects.Delete(ref)
			}
		}
	}
	v.mu.Lock()
	if reload {
		v.state = next
	} else {
		v.state.applyRows(d)
		v.state.applyReferenced(d)
	}
	v.snapshot, v.asOf, v.dbAsOf = snapshot, began, dbNow
	v.offset = dbNow.Sub(began.Add(read.Sub(began) / 2))
	v.mu.Unlock()
	if reload {
		v.reloads.Add(1)
	}
	v.prune(ctx, began, xmin)
	return nil
}

func readFeed(ctx context.Context, tx pgx.Tx, prev string) (map[string][]string, error) {
	rows, err := tx.Query(ctx, viewFeedSQL, prev)
	if err != nil {
		return nil, fmt.Errorf("read the change feed: %w", err)
	}
	changed := map[string][]string{}
	var kind, key string
	_, err = pgx.ForEachRow(rows, []any{&kind, &key}, func() error {
		changed[kind] = append(changed[kind], key)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the change feed: %w", err)
	}
	return changed, nil
}

// prune drops the feed's notes of transactions that ended more than gate.feed_retention ago: every view that caught
// up since has read them. A view whose last snapshot lies below the mark reloads.
func (v *VerdictView) prune(ctx context.Context, at time.Time, xmin string) {
	if len(v.samples) == 0 || at.Sub(v.samples[len(v.samples)-1].at) >= v.feedRetained/10 {
		v.samples = append(v.samples, horizonSample{at: at, xmin: xmin})
	}
	cut := -1
	for i, s := range v.samples {
		if at.Sub(s.at) >= v.feedRetained {
			cut = i
		}
	}
	if cut < 0 || at.Sub(v.lastPrune) < v.feedRetained/10 {
		return
	}
	mark := v.samples[cut].xmin
	v.samples = v.samples[cut+1:]
	v.lastPrune = at
	err := pgx.BeginFunc(ctx, v.s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM gcos_change_feed WHERE xid < $1::xid8`, mark); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE gcos_change_feed_horizon SET pruned_below = greatest(pruned_below, $1::xid8)`, mark)
		return err
	})
	if err != nil {
		v.s.logger.Warn("gate view: prune the change feed", "err", err)
	}
}

// The view's reads: the candidate state under the current ruleset, with what decay and coverage need.
const (
	viewRulesetSQL = `SELECT coalesce((SELECT ruleset_version FROM v_current_ruleset), ''),
		coalesce((SELECT status FROM governance_ruleset WHERE ruleset_version = (SELECT ruleset_version FROM v_current_ruleset)), ''),
		coalesce((SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'), '')`
	viewGroupSQL = `SELECT group_key, object_class, source_registry, lifecycle_status, coalesce(scope, ''), retired_at IS NOT NULL
		FROM governance_group`
	viewRowCols = `source_snapshot_ref, ruleset_version, scan_time, candidate_verdict, input_quality_state, dirty,
		dirty_reason, stale_after, recompute_status, risk_class, coverage_required, coverage_scan_ref, owner_scope,
		lifecycle_status`
	viewStateSQL    = `SELECT group_key, ` + viewRowCols + `, member_count FROM governance_candidate_state WHERE ruleset_version = $1`
	viewObjectSQL   = `SELECT object_ref, candidate_key, group_key, ` + viewRowCols + ` FROM governance_candidate_object WHERE ruleset_version = $1 AND lifecycle_status = 'active'`
	viewCoverageSQL = `SELECT candidate_ref, outcome, owner_ref, exception_id, exception_expires_at, exception_fingerprint
		FROM governance_candidate_coverage WHERE ruleset_version = $1`
)

// loadViewState reads the whole state; clock is the previous state's (a reload stamps everything anew).
func loadViewState(ctx context.Context, tx pgx.Tx, clock uint64) (*viewState, error) {
	st := &viewState{groups: map[string]viewGroup{}, byBase: map[BirthBase][]string{}, states: map[string]gcos.CandidateRow{},
		objects: map[string]viewObject{}, coverage: map[string]gcos.CoverageRecord{}, objectOfCandidate: map[string]string{},
		clock: clock + 1, gen: clock + 1, baseGen: map[BirthBase]uint64{}, objectGen: map[ObjectRef]uint64{}}
	if err := tx.QueryRow(ctx, viewRulesetSQL).Scan(&st.version, &st.versionStatus, &st.active); err != nil {
		return nil, fmt.Errorf("load rulesets: %w", err)
	}
	d := newViewDelta()
	if err := d.read(ctx, tx, st.version, nil); err != nil {
		return nil, err
	}
	st.applyRows(d)
	snaps, exceptions := map[int64]bool{}, map[string]bool{}
	st.referenced(snaps, exceptions)
	if err := d.readReferenced(ctx, tx, snaps, exceptions); err != nil {
		return nil, err
	}
	st.applyReferenced(d)
	return st, nil
}

// viewDelta is what a catch-up read: the rows of the changed keys (absent: gone) and the referenced tables anew.
type viewDelta struct {
	groups   map[string]*viewGroup
	states   map[string]*gcos.CandidateRow
	objects  map[string]*viewObject
	coverage map[string]*gcos.CoverageRecord

	snapshots   map[int64]time.Time
	exceptions  map[string]*gcos.ExceptionRow
	collections map[string]bool
	classes     map[string]bool
}

func newViewDelta() *viewDelta {
	return &viewDelta{groups: map[string]*viewGroup{}, states: map[string]*gcos.CandidateRow{}, objects: map[string]*viewObject{},
		coverage: map[string]*gcos.CoverageRecord{}}
}

// read reads the rows of the changed keys under version (every row when changed is nil); a changed key with no
// row left is recorded as gone.
func (d *viewDelta) read(ctx context.Context, tx pgx.Tx, version string, changed map[string][]string) error {
	all := changed == nil
	for _, k := range changed[feedGroup] {
		d.groups[k] = nil
	}
	for _, k := range changed[feedState] {
		d.states[k] = nil
	}
	for _, k := range changed[feedObject] {
		d.objects[k] = nil
	}
	for _, k := range changed[feedCoverage] {
		d.coverage[k] = nil
	}
	b := &pgx.Batch{}
	queue := func(sql string, versioned bool, keys []string, dest []any, each func()) {
		var args []any
		if versioned {
			args = append(args, version)
		}
		if !all {
			if len(keys) == 0 {
				return
			}
			where := " AND "
			if !versioned {
				where = " WHERE "
			}
			sql, args = sql+where+keyColumn(sql)+fmt.Sprintf(" = ANY($%d)", len(args)+1), append(args, keys)
		}
		b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
			_, err := pgx.ForEachRow(rows, dest, func() error { each(); return nil })
			return err
		})
	}
	var key string
	var g viewGroup
	queue(viewGroupSQL, false, changed[feedGroup], []any{&key, &g.base.Class, &g.base.Coll, &g.base.Status, &g.scope, &g.retired}, func() {
		x := g
		d.groups[key] = &x
	})
	var r gcos.CandidateRow
	queue(viewStateSQL, true, changed[feedState], append(append([]any{&r.GroupKey}, rowDest(&r)...), &r.MemberCount), func() {
		x := r
		d.states[x.GroupKey] = &x
	})
	var o viewObject
	queue(viewObjectSQL, true, changed[feedObject], append([]any{&key, &o.row.GroupKey, &o.group}, rowDest(&o.row)...), func() {
		x := o
		x.row.MemberCount = 1
		d.objects[key] = &x
	})
	var outcome string
	var c gcos.CoverageRecord
	queue(viewCoverageSQL, true, changed[feedCoverage], []any{&key, &outcome, &c.Owner, &c.ExceptionID, &c.ExceptionExpiresAt, &c.ExceptionFingerprint}, func() {
		x := c
		x.Outcome = gcos.CoverageOutcome(outcome)
		d.coverage[key] = &x
	})
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("read the candidate state: %w", err)
	}
	return nil
}

// keyColumn is the key a view statement is narrowed by: its first column.
func keyColumn(sql string) string {
	return strings.TrimSuffix(strings.Fields(strings.TrimPrefix(strings.TrimSpace(sql), "SELECT"))[0], ",")
}

// applyRows writes the delta's rows into the state (under the view's lock) and stamps what changed: the bases
// whose groups, candidate rows or coverage changed, the objects whose row or coverage did. A candidate row whose
// only change is its member count changes no answer and stamps nothing.
func (st *viewState) applyRows(d *viewDelta) {
	stamp := func() uint64 { st.clock++; return st.clock }
	bumpBase := func(b BirthBase) { st.baseGen[b] = stamp() }
	bumpGroup := func(key string) {
		if g, ok := st.groups[key]; ok {
			bumpBase(g.base)
		} else {
			st.gen = stamp()
		}
	}
	bumpObject := func(ref string) {
		if r, err := ParseObjectRef(ref); err == nil {
			st.objectGen[r] = stamp()
		} else {
			st.gen = stamp()
		}
	}
	for k, g := range d.groups {
		old, had := st.groups[k]
		if had && g != nil && old == *g {
			continue
		}
		if had {
			bumpBase(old.base)
			if !old.retired {
				st.byBase[old.base] = slices.DeleteFunc(st.byBase[old.base], func(x string) bool { return x == k })
			}
		}
		if g == nil {
			delete(st.groups, k)
			continue
		}
		st.groups[k] = *g
		bumpBase(g.base)
		if !g.retired {
			keys := append(st.byBase[g.base], k)
			slices.SortFunc(keys, func(a, b string) int {
				return cmp.Or(cmp.Compare(st.groups[a].scope, st.groups[b].scope), cmp.Compare(a, b))
			})
			st.byBase[g.base] = keys
		}
	}
	for k, r := range d.states {
		old, had := st.states[k]
		switch {
		case r == nil && had:
			delete(st.states, k)
			bumpGroup(k)
		case r == nil:
		case had && sameRow(old, *r):
			st.states[k] = *r
		default:
			st.states[k] = *r
			bumpGroup(k)
		}
	}
	for ref, o := range d.objects {
		old, had := st.objects[ref]
		switch {
		case o == nil && had:
			delete(st.objects, ref)
			delete(st.objectOfCandidate, old.row.GroupKey)
			bumpObject(ref)
		case o == nil:
		case had && old.group == o.group && sameRow(old.row, o.row):
		default:
			st.objects[ref] = *o
			st.objectOfCandidate[o.row.GroupKey] = ref
			bumpObject(ref)
		}
	}
	for ref, c := range d.coverage {
		old, had := st.coverage[ref]
		switch {
		case c == nil && !had, c != nil && had && reflect.DeepEqual(old, *c):
			continue
		case c == nil:
			delete(st.coverage, ref)
		default:
			st.coverage[ref] = *c
		}
		if cand, ok := strings.CutPrefix(ref, "object:"); ok {
			if obj, ok := st.objectOfCandidate[cand]; ok {
				bumpObject(obj)
			} else {
				st.gen = stamp()
			}
		} else {
			bumpGroup(ref)
		}
	}
}

// sameRow reports whether two candidate rows give the same answers: equal but for their member counts.
func sameRow(a, b gcos.CandidateRow) bool {
	a.MemberCount, b.MemberCount = 0, 0
	return reflect.DeepEqual(a, b)
}

// applyReferenced takes the referenced tables' new reads; any change stamps the whole view.
func (st *viewState) applyReferenced(d *viewDelta) {
	if !maps.EqualFunc(st.snapshots, d.snapshots, time.Time.Equal) || !reflect.DeepEqual(st.exceptions, d.exceptions) ||
		!maps.Equal(st.collections, d.collections) || !maps.Equal(st.classes, d.classes) {
		st.clock++
		st.gen = st.clock
	}
	st.snapshots, st.exceptions, st.collections, st.classes = d.snapshots, d.exceptions, d.collections, d.classes
}

func rowDest(r *gcos.CandidateRow) []any {
	return []any{&r.SnapshotRef, &r.RulesetVersion, &r.ScanTime, &r.Verdict, &r.InputQualityState, &r.Dirty,
		&r.DirtyReason, &r.StaleAfter, &r.RecomputeStatus, &r.RiskClass, &r.CoverageRequired, &r.CoverageScanRef,
		&r.OwnerScope, &r.LifecycleStatus}
}

// referenced lists the snapshots and exceptions the state's rows reference (call with the state's lock held when
// it is shared), adding them to the given sets.
func (st *viewState) referenced(snaps map[int64]bool, exceptions map[string]bool) {
	for _, r := range st.states {
		snaps[r.SnapshotRef] = true
	}
	for _, o := range st.objects {
		snaps[o.row.SnapshotRef] = true
	}
	for _, c := range st.coverage {
		if c.ExceptionID != nil {
			exceptions[*c.ExceptionID] = true
		}
	}
}

// readReferenced reads, on every catch-up, what lives in tables GCOS may not put a trigger on: the snapshots the
// rows reference, the exception registry's current rows their coverage names, and the registries' names.
func (d *viewDelta) readReferenced(ctx context.Context, tx pgx.Tx, snaps map[int64]bool, exceptions map[string]bool) error {
	for _, r := range d.states {
		if r != nil {
			snaps[r.SnapshotRef] = true
		}
	}
	for _, o := range d.objects {
		if o != nil {
			snaps[o.row.SnapshotRef] = true
		}
	}
	for _, c := range d.coverage {
		if c != nil && c.ExceptionID != nil {
			exceptions[*c.ExceptionID] = true
		}
	}
	b := &pgx.Batch{}
	d.snapshots, d.exceptions = map[int64]time.Time{}, map[string]*gcos.ExceptionRow{}
	d.collections, d.classes = map[string]bool{}, map[string]bool{}
	b.Queue(`SELECT id, snapshot_at FROM evolution_snapshots WHERE id = ANY($1)`, keysOf(snaps)).Query(func(rows pgx.Rows) error {
		var id int64
		var at time.Time
		_, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error { d.snapshots[id] = at; return nil })
		return err
	})
	b.Queue(`SELECT id, gcos_exception_row(id) FROM unnest($1::text[]) id`, keysOf(exceptions)).Query(func(rows pgx.Rows) error {
		var id string
		var row []byte
		_, err := pgx.ForEachRow(rows, []any{&id, &row}, func() error {
			if row == nil {
				d.exceptions[id] = nil
				return nil
			}
			var x gcos.ExceptionRow
			if err := json.Unmarshal(row, &x); err != nil {
				return fmt.Errorf("read exception %s: %w", id, err)
			}
			d.exceptions[id] = &x
			return nil
		})
		return err
	})
	names := func(into map[string]bool) func(pgx.Rows) error {
		return func(rows pgx.Rows) error {
			var n string
			_, err := pgx.ForEachRow(rows, []any{&n}, func() error { into[n] = true; return nil })
			return err
		}
	}
	b.Queue(`SELECT collection_name FROM collection_registry`).Query(names(d.collections))
	b.Queue(`SELECT entity_type FROM meta_catalog`).Query(names(d.classes))
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("read snapshots, exceptions and registries: %w", err)
	}
	return nil
}

func keysOf[K comparable](m map[K]bool) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// decide answers from the view: a remembered answer while nothing it rests on has moved, else the same reads as
// the database's statement (gateReads), in the same order, as of the view's last catch-up with the database clock
// carried forward, judged as the database's are. ok is false when the view cannot answer within its bound.
func (v *VerdictView) decide(ctx context.Context, ref ObjectRef, action string) (GateResult, gateFollowUps, bool) {
	own, ok := v.birth(ctx, ref)
	if !ok {
		return GateResult{}, gateFollowUps{}, false
	}
	var parent birthRaw
	if own.parent != nil {
		if parent, ok = v.birth(ctx, ObjectRef{Collection: ref.Collection, Code: *own.parent}); !ok {
			return GateResult{}, gateFollowUps{}, false
		}
	}
	slot := 0
	if action == gcos.ActionRead {
		slot = 1
	}
	v.mu.RLock()
	if !v.freshLocked() {
		v.mu.RUnlock()
		return GateResult{}, gateFollowUps{}, false
	}
	st, asOf, now := v.state, v.dbAsOf, time.Now().Add(v.offset)
	base := own.base(parent)
	stamp := answerStamp{gen: st.gen, base: st.baseGen[base], object: st.objectGen[ref]}
	if a := v.entry(ref).answers[slot].Load(); a != nil {
		if a.stamp == stamp && now.Before(a.validUntil) && a.own.same(own) && a.parent.same(parent) {
			v.mu.RUnlock()
			v.answered.Add(1)
			res, fu := a.res, a.fu
			res.DecidedAt, res.AsOf, fu.answer = now, asOf, a
			return res, fu, true
		}
	}
	o, version, fingerprint := st.reads(ref, own, parent, base, now)
	v.mu.RUnlock()
	ctx, cancel := context.WithTimeout(ctx, v.s.cfg.Gate.Timeout.Duration())
	defer cancel()
	o, err := v.s.completeReads(ctx, v.s.gatePool, ref, o, version, fingerprint)
	if err != nil {
		return GateResult{}, gateFollowUps{}, false
	}
	res := GateResult{Object: ref.String(), Action: action, Decision: gcos.GateBlock, Reasons: []string{}, Consulted: []ConsultedRow{},
		AsOf: asOf, Source: SourceView}
	res, fu := v.s.judge(ref, action, o, res)
	res.Reasons, res.Consulted = slices.Clip(res.Reasons), slices.Clip(res.Consulted) // shared: an append copies
	a := &rememberedAnswer{stamp: stamp, own: own, parent: parent, validUntil: validUntil(o.reads, now), res: res, fu: fu}
	v.entry(ref).answers[slot].Store(a)
	v.answered.Add(1)
	fu.answer = a
	return res, fu, true
}

// objectEntry is what the view remembers of one object: its birth row and its last answer per action.
type objectEntry struct {
	birth   atomic.Pointer[birthRaw]
	answers [2]atomic.Pointer[rememberedAnswer] // write, read
}

// entry is the object's entry, made when first asked for; past gate.view_objects entries all are forgotten
// (forgetting only costs reads).
func (v *VerdictView) entry(ref ObjectRef) *objectEntry {
	if x, ok := v.objects.Load(ref); ok {
		return x.(*objectEntry)
	}
	x, loaded := v.objects.LoadOrStore(ref, &objectEntry{})
	if !loaded && v.objectCount.Add(1) > int64(v.maxObjects) {
		v.objects.Clear()
		v.objectCount.Store(0)
	}
	return x.(*objectEntry)
}

// answerStamp is what a remembered answer rests on: the view's generation (rulesets, snapshots, exceptions,
// registries), its base's and its object row's.
type answerStamp struct{ gen, base, object uint64 }

// rememberedAnswer is an answer the view gave, valid while its stamp and the births it read are unchanged and the
// clock has not reached the first instant at which a read-time comparison could turn.
type rememberedAnswer struct {
	stamp       answerStamp
	own, parent birthRaw
	validUntil  time.Time
	res         GateResult
	fu          gateFollowUps
	quiet       atomic.Int64 // unix ns until which every follow-up of the answer is done (GateWith)
}

// validUntil is the first instant after now at which the time decay could change the answer: a row's stale_after
// or the expiry of an exception its coverage rests on (gcos.Effective, gcos.ExceptionRow.Holds).
func validUntil(reads []candidateRead, now time.Time) time.Time {
	until := now.Add(24 * time.Hour)
	earlier := func(t *time.Time) {
		if t != nil && now.Before(*t) && t.Before(until) {
			until = *t
		}
	}
	for _, r := range reads {
		earlier(r.row.StaleAfter)
		if r.exception != nil {
			earlier(r.exception.ExpiresAt)
		}
	}
	return until
}

// base is the base group an object with this birth (and its parent's, for an inherited child) belongs to.
func (b birthRaw) base(parent birthRaw) BirthBase {
	if b.parent != nil {
		return BirthBase{Class: parent.class, Coll: parent.coll, Status: parent.status}
	}
	return BirthBase{Class: b.class, Coll: b.coll, Status: b.status}
}

// same reports whether two reads of a birth row hold the same values.
func (b birthRaw) same(c birthRaw) bool {
	return b.class == c.class && b.coll == c.coll && b.status == c.status && b.h0 == c.h0 && b.h1 == c.h1 &&
		(b.parent == nil) == (c.parent == nil) && (b.parent == nil || *b.parent == *c.parent)
}

// reads builds, from the state (under the view's lock), what the database's gate statement reads for the object:
// its object row under the current ruleset, then its base's groups by scope, with the clock now.
func (st *viewState) reads(ref ObjectRef, own, parent birthRaw, base BirthBase, now time.Time) (objectReads, string, *string) {
	o := objectReads{now: now}
	b := &o.birth
	b.Object, b.Class, b.Collection, b.LifecycleStatus = ref.String(), base.Class, base.Coll, base.Status
	b.OwnLifecycleStatus, b.ParentCode, b.ParentFound = own.status, own.parent, own.parent != nil
	b.CollectionRegistered, b.ClassRegistered = st.collections[b.Collection], st.classes[b.Class]
	read := func(source, key, scope, coverageRef string, row gcos.CandidateRow, found bool) candidateRead {
		r := candidateRead{source: source, key: key, scope: scope, activeVersion: st.active}
		if !found {
			return r
		}
		r.row, r.rulesetStatus = row, st.versionStatus
		if at, ok := st.snapshots[row.SnapshotRef]; ok {
			r.snapshotExists, r.snapshotAt = true, &at
		}
		if c, ok := st.coverage[coverageRef]; ok {
			r.recorded, r.coverage = c, c.Outcome
			if c.ExceptionID != nil {
				r.exception = st.exceptions[*c.ExceptionID]
			}
		}
		return r
	}
	if st.version != "" {
		if obj, ok := st.objects[ref.String()]; ok {
			if g, ok := st.groups[obj.group]; ok {
				o.reads = append(o.reads, read(gcos.GateSourceObject, obj.row.GroupKey, g.scope, "object:"+obj.row.GroupKey, obj.row, true))
			}
		}
	}
	keys := st.byBase[base]
	if len(keys) == 0 {
		o.reads = append(o.reads, read(gcos.GateSourceGroup, "", "", "", gcos.CandidateRow{}, false))
	}
	for _, k := range keys {
		row, found := st.states[k]
		o.reads = append(o.reads, read(gcos.GateSourceGroup, k, st.groups[k].scope, k, row, found && st.version != ""))
	}
	return o, st.version, gcos.Str(gcos.FingerprintFromRowHashes(own.h0, own.h1).String())
}

// birth is an object's cached birth row, read (and cached) on a miss. ok is false when it has none, or it could
// not be read, or a catch-up dropped births while it was read (it is then used for no answer).
func (v *VerdictView) birth(ctx context.Context, ref ObjectRef) (birthRaw, bool) {
	e := v.entry(ref)
	if b := e.birth.Load(); b != nil && time.Since(b.readAt) <= v.birthMaxAge {
		return *b, true
	}
	gen, began := v.birthGen.Load(), time.Now()
	ctx, cancel := context.WithTimeout(ctx, v.s.cfg.Gate.Timeout.Duration())
	defer cancel()
	var b birthRaw
	err := v.s.gatePool.QueryRow(ctx, v.s.birthRawSQLText, ref.Collection, ref.Code).Scan(&b.class, &b.coll, &b.status, &b.parent, &b.h0, &b.h1)
	if err != nil {
		if !errors.Is(err, pgx.ErrNoRows) {
			v.s.logger.Debug("gate view: read birth", "object", ref, "err", err)
		}
		return b, false
	}
	b.readAt = began
	if v.birthGen.Load() != gen {
		return b, false
	}
	e.birth.Store(&b)
	return b, true
}

// birthRawSQL reads one birth row as the source holds it, with its fingerprint lanes.
func (b BirthBinding) birthRawSQL() string {
	return b.SQL(`SELECT b.{type}, b.{coll}, b.{status}, b.{parent}, fh.h, hashint8extended(fh.h, 1)
FROM {t} b CROSS JOIN LATERAL (SELECT ` + rowHashExpr + ` AS h) fh
WHERE b.{coll} = $1 AND b.{code} = $2`)
}

// Decide is the gate's decision as the view gives it (reading through when it must), with no follow-up: what a
// comparison of the view with the database reads.
func (v *VerdictView) Decide(ctx context.Context, object, action string) GateResult {
	if v.s.view.Load() != v {
		return GateResult{Object: object, Action: action, Decision: gcos.GateBlock, Reasons: []string{"gate view: not attached to its store"}}
	}
	res, _ := v.s.decide(ctx, object, action, GateOptions{})
	return res
}

// NoteBirthsTx tells the gate's views, in the handoff's transaction, that these objects' birth rows may have
// changed (a change-ledger row named them): a view drops its cached copy when it catches up past this commit.
func NoteBirthsTx(ctx context.Context, tx pgx.Tx, objects []string) error {
	if len(objects) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO gcos_change_feed (kind, key) SELECT DISTINCT $2::text, unnest($1::text[])`, objects, feedBirth); err != nil {
		return fmt.Errorf("note changed births: %w", err)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('gcos_change_feed', $1)`, feedBirth); err != nil {
		return fmt.Errorf("note changed births: %w", err)
	}
	return nil
}
