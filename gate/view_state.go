package gate

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// The view's state: what a catch-up reads and how it is applied and stamped.

// viewState is what one catch-up leaves: the current ruleset's candidate state, keyed as the gate looks it up.
type viewState struct {
	version       string // the current ruleset (v_current_ruleset); "" when none
	versionStatus string
	active        string // the active ruleset ("" when none)
	groups        map[string]viewGroup
	byBase        map[postgres.BirthBase][]string // a base's groups that are not retired, by scope then key
	states        map[string]gcos.CandidateRow
	objects       map[string]viewObject // active object rows by object_ref
	coverage      map[string]gcos.CoverageRecord
	snapshots     map[int64]time.Time
	exceptions    map[string]*gcos.ExceptionRow // the registry's current row (nil: gone)
	collections   map[string]bool
	classes       map[string]bool
	// objectOfCandidate maps an object row's candidate key to its object_ref (its coverage is keyed by the former).
	objectOfCandidate map[string]string
	// snapshotRefs and exceptionRefs count the rows that reference each snapshot and each exception, kept as rows
	// are applied: a catch-up reads the referenced rows anew without walking every row (referenced).
	snapshotRefs  map[int64]int
	exceptionRefs map[string]int

	// Stamps of what changed, from one clock (a remembered answer is valid while its stamps are): gen for what every
	// answer rests on (rulesets, snapshots, exceptions, registries), baseGen per base, objectGen per object row.
	clock, gen uint64
	baseGen    map[postgres.BirthBase]uint64
	objectGen  map[postgres.ObjectRef]uint64
}

type viewGroup struct {
	base    postgres.BirthBase
	scope   string
	retired bool
}

type viewObject struct {
	group string
	row   gcos.CandidateRow // GroupKey holds the object's candidate key
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
	st := &viewState{groups: map[string]viewGroup{}, byBase: map[postgres.BirthBase][]string{}, states: map[string]gcos.CandidateRow{},
		objects: map[string]viewObject{}, coverage: map[string]gcos.CoverageRecord{}, objectOfCandidate: map[string]string{},
		snapshotRefs: map[int64]int{}, exceptionRefs: map[string]int{}, clock: clock + 1, gen: clock + 1, baseGen: map[postgres.BirthBase]uint64{}, objectGen: map[postgres.ObjectRef]uint64{}}
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
	for _, k := range changed[postgres.FeedGroup] {
		d.groups[k] = nil
	}
	for _, k := range changed[postgres.FeedState] {
		d.states[k] = nil
	}
	for _, k := range changed[postgres.FeedObject] {
		d.objects[k] = nil
	}
	for _, k := range changed[postgres.FeedCoverage] {
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
	queue(viewGroupSQL, false, changed[postgres.FeedGroup], []any{&key, &g.base.Class, &g.base.Coll, &g.base.Status, &g.scope, &g.retired}, func() {
		x := g
		d.groups[key] = &x
	})
	var r gcos.CandidateRow
	queue(viewStateSQL, true, changed[postgres.FeedState], append(append([]any{&r.GroupKey}, rowDest(&r)...), &r.MemberCount), func() {
		x := r
		d.states[x.GroupKey] = &x
	})
	var o viewObject
	queue(viewObjectSQL, true, changed[postgres.FeedObject], append([]any{&key, &o.row.GroupKey, &o.group}, rowDest(&o.row)...), func() {
		x := o
		x.row.MemberCount = 1
		d.objects[key] = &x
	})
	var outcome string
	var c gcos.CoverageRecord
	queue(viewCoverageSQL, true, changed[postgres.FeedCoverage], []any{&key, &outcome, &c.Owner, &c.ExceptionID, &c.ExceptionExpiresAt, &c.ExceptionFingerprint}, func() {
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
	bumpBase := func(b postgres.BirthBase) { st.baseGen[b] = stamp() }
	bumpGroup := func(key string) {
		if g, ok := st.groups[key]; ok {
			bumpBase(g.base)
		} else {
			st.gen = stamp()
		}
	}
	bumpObject := func(ref string) {
		if r, err := postgres.ParseObjectRef(ref); err == nil {
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
		if had {
			refCount(st.snapshotRefs, old.SnapshotRef, -1)
		}
		if r != nil {
			refCount(st.snapshotRefs, r.SnapshotRef, 1)
		}
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
			refCount(st.snapshotRefs, old.row.SnapshotRef, -1)
			delete(st.objects, ref)
			delete(st.objectOfCandidate, old.row.GroupKey)
			bumpObject(ref)
		case o == nil:
		case had && old.group == o.group && sameRow(old.row, o.row):
		default:
			if had {
				refCount(st.snapshotRefs, old.row.SnapshotRef, -1)
			}
			refCount(st.snapshotRefs, o.row.SnapshotRef, 1)
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
		if had && old.ExceptionID != nil {
			refCount(st.exceptionRefs, *old.ExceptionID, -1)
		}
		if c != nil && c.ExceptionID != nil {
			refCount(st.exceptionRefs, *c.ExceptionID, 1)
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
// it is shared), adding them to the given sets. The counts are kept as rows are applied, so this costs the few
// snapshots and exceptions referenced, not the rows.
func (st *viewState) referenced(snaps map[int64]bool, exceptions map[string]bool) {
	for id := range st.snapshotRefs {
		snaps[id] = true
	}
	for id := range st.exceptionRefs {
		exceptions[id] = true
	}
}

// refCount adds delta to key's count in refs, dropping the key when no row references it any more.
func refCount[K comparable](refs map[K]int, key K, delta int) {
	if n := refs[key] + delta; n > 0 {
		refs[key] = n
	} else {
		delete(refs, key)
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
