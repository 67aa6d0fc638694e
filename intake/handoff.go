package intake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// The handoff apply step (SPEC §9.1): each tailed row maps to (change_kind, group_key, object_ref,
// canonical_address); changes are coalesced per group within the page, groups are dirtied by the one dirty-mark
// API, and one governance.handoff.<kind> signal per (group, kind, id bucket) is emitted — all inside the poll's
// transaction, so the cursor advances together with what the rows produced.

// registryCache keeps the registries the mapping needs for a short time, so a busy tail does not reload them on
// every page. A registry change reaches GCOS as a changelog signal that dirties the affected groups anyway.
type registryCache struct {
	mu     sync.Mutex
	cur    *registrySet
	loaded time.Time
	known  map[string]struct{} // group keys known to be committed to governance_group (groups are never deleted)
}

// registrySet is one load of the registries with the groups derived from it, so each base group's key in every
// scope is computed once per load rather than once per page.
type registrySet struct {
	regs   gcos.Registries
	mu     sync.Mutex
	groups map[postgres.BirthBase][]gcos.Group // member counts unset
}

func (rs *registrySet) groupsOf(b postgres.BirthBase) []gcos.Group {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if g, ok := rs.groups[b]; ok {
		return g
	}
	var out []gcos.Group
	for _, d := range rs.regs.Dimensions(gcos.BaseGroup{ObjectClass: b.Class, SourceRegistry: b.Coll, LifecycleStatus: b.Status}) {
		out = append(out, gcos.NewGroup(d, 0))
	}
	rs.groups[b] = out
	return out
}

const registryCacheTTL = time.Second

func (s *Stage) cachedRegistries(ctx context.Context, q postgres.Querier) (*registrySet, error) {
	s.regCache.mu.Lock()
	defer s.regCache.mu.Unlock()
	if s.regCache.cur != nil && time.Since(s.regCache.loaded) < registryCacheTTL {
		return s.regCache.cur, nil
	}
	regs, err := s.core.DimensionRegistries(ctx, q, "")
	if err != nil {
		return nil, err
	}
	// Unchanged registries derive the same groups: a busy tail keeps the groups it derived instead of deriving
	// them again every second.
	if cur := s.regCache.cur; cur == nil || !reflect.DeepEqual(cur.regs, regs) {
		s.regCache.cur = &registrySet{regs: regs, groups: map[postgres.BirthBase][]gcos.Group{}}
	}
	s.regCache.loaded = time.Now()
	return s.regCache.cur, nil
}

// freshRegistries is the registry set loaded less than registryCacheTTL ago, without loading one: nil if there is
// none (a read-ahead plans with it and never waits on the database for it).
func (s *Stage) freshRegistries() *registrySet {
	s.regCache.mu.Lock()
	defer s.regCache.mu.Unlock()
	if s.regCache.cur != nil && time.Since(s.regCache.loaded) < registryCacheTTL {
		return s.regCache.cur
	}
	return nil
}

// unknownGroups returns the groups not yet known to be recorded.
func (s *Stage) unknownGroups(groups []gcos.Group) []gcos.Group {
	s.regCache.mu.Lock()
	defer s.regCache.mu.Unlock()
	var out []gcos.Group
	for _, g := range groups {
		if _, ok := s.regCache.known[g.Key]; !ok {
			out = append(out, g)
		}
	}
	return out
}

// rememberGroups notes group keys that are committed to governance_group.
func (s *Stage) rememberGroups(keys []string) {
	s.regCache.mu.Lock()
	defer s.regCache.mu.Unlock()
	if s.regCache.known == nil {
		s.regCache.known = map[string]struct{}{}
	}
	for _, k := range keys {
		s.regCache.known[k] = struct{}{}
	}
}

// HandoffStats counts what one apply did.
type HandoffStats struct {
	Rows      int            `json:"rows"`
	Signals   int            `json:"signals"`   // coalesced (group, kind) changes
	Dirtied   int64          `json:"dirtied"`   // groups newly marked dirty
	Emitted   int            `json:"emitted"`   // outbox rows
	Captured  int            `json:"captured"`  // event_pending captures (type not active)
	Skipped   int            `json:"skipped"`   // rows a mapping rule deliberately skips, and GCOS's own echo
	Unmapped  int            `json:"unmapped"`  // rows no mapping rule matches (reported, never silent)
	Untrusted int            `json:"untrusted"` // rows from an untrusted source system (quarantined)
	Kinds     map[string]int `json:"kinds"`

	marked []string // the keys of the groups this apply marked (the storm rule's count is of distinct groups)
}

// trustedSources answers IntakeConfig.Trusted once per source system of a page: a page holds thousands of rows
// from a handful of source systems, and each answer matches globs.
type trustedSources struct {
	cfg  *gcos.IntakeConfig
	seen map[string]bool
}

func (t *trustedSources) of(source string) bool {
	ok, seen := t.seen[source]
	if !seen {
		if t.seen == nil {
			t.seen = map[string]bool{}
		}
		ok = t.cfg.Trusted(source)
		t.seen[source] = ok
	}
	return ok
}

// signal is one coalesced change: a kind on a set of groups.
type signal struct {
	kind      gcos.ChangeKind
	groups    []string
	subject   string // what the change is about (collection, class, object)
	coll      string
	code      string
	actor     string
	source    string
	firstID   int64
	occurred  time.Time
	table     string
	objectTyp string
	object    *postgres.BirthBase // a change to one object: its base now (its object row, if any, is judged again)
	births    []int64             // the births an object_born signal carries (their ids)
}

// ApplyHandoff is the intake's apply step for a page of tailed rows. Rows that cannot be mapped are returned as
// failures (they go to the retry lane and, after max attempts, the DLQ) and never block the page. What a page did
// is added to the stage's HandoffTotals.
func (s *Stage) ApplyHandoff(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]RowFailure, HandoffStats, error) {
	failures, st, err := s.applyHandoff(ctx, tx, rows)
	if t := tallyOf(ctx); t != nil && err == nil {
		// A page retried without its failed rows reports again: the tally keeps the last, applied, attempt.
		*t = batchTally{signals: st.Signals, emitted: st.Emitted, captured: st.Captured, dirtied: st.Dirtied, marked: st.marked}
	}
	if err == nil {
		s.totalsMu.Lock()
		s.totals.add(st)
		s.totalsMu.Unlock()
	}
	return failures, st, err
}

// HandoffTotals adds up what every page this stage applied did (including pages whose poll later rolled back).
func (s *Stage) HandoffTotals() HandoffStats {
	s.totalsMu.Lock()
	defer s.totalsMu.Unlock()
	out := s.totals
	out.Kinds = maps.Clone(s.totals.Kinds)
	return out
}

// add adds st to h.
func (h *HandoffStats) add(st HandoffStats) {
	h.Rows += st.Rows
	h.Signals += st.Signals
	h.Dirtied += st.Dirtied
	h.Emitted += st.Emitted
	h.Captured += st.Captured
	h.Skipped += st.Skipped
	h.Unmapped += st.Unmapped
	h.Untrusted += st.Untrusted
	for k, n := range st.Kinds {
		if h.Kinds == nil {
			h.Kinds = map[string]int{}
		}
		h.Kinds[k] += n
	}
}

func (s *Stage) applyHandoff(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]RowFailure, HandoffStats, error) {
	st := HandoffStats{Rows: len(rows), Kinds: map[string]int{}}
	if len(rows) == 0 {
		return nil, st, nil
	}
	rset, err := s.cachedRegistries(ctx, tx)
	if err != nil {
		return nil, st, err
	}
	var failures []RowFailure
	counts := collectionCounts{}   // member counts per collection, counted at most once per page
	recounted := map[string]bool{} // collections whose kept counts a change of the page counted again
	births := make([]*postgres.TailRow, 0, len(rows))
	var sigs []*signal
	birthSource := postgres.BirthTailSource(s.cfg.Binding).Name
	own, err := ownAuditRows(ctx, tx, rows, birthSource)
	if err != nil {
		return nil, st, err
	}
	trusted := trustedSources{cfg: &s.cfg.Intake}
	var unmapped, untrusted rowReports
	var named []string // objects a change-ledger row names, mapped or not: the gate's views drop their births
	for i := range rows {
		r := &rows[i] // rows are large: never copied
		if r.Source == birthSource {
			if err := birthInvalid(r); err != nil {
				failures = append(failures, RowFailure{ID: r.ID, Kind: gcos.ChangeObjectBorn, Err: err})
				continue
			}
			births = append(births, r)
			continue
		}
		if coll := rset.regs.Classes[r.EntityType]; coll != nil && r.EntityCode != "" {
			named = append(named, *coll+":"+r.EntityCode)
		}
		kind, matched := s.cfg.Intake.ClassifyChangelog(r.EntityType, r.Action)
		switch {
		case own[r.ID] && kind != gcos.ChangeRuleset:
			st.Skipped++ // GCOS's own audit row (recorded by id when written): never fed back
			continue
		case !matched:
			st.Unmapped++
			unmapped.add(r.Source, r.EntityType+"/"+r.Action, r.ID)
			continue
		case kind == "":
			st.Skipped++ // a rule says skip
			continue
		case !own[r.ID] && !r.Observed && !trusted.of(r.ChangedBy):
			st.Untrusted++
			untrusted.add(r.Source, r.ChangedBy, r.ID)
			continue
		}
		sig, err := s.mapChangelog(ctx, tx, rset, counts, recounted, *r, kind)
		if err != nil {
			failures = append(failures, RowFailure{ID: r.ID, Err: err})
			continue
		}
		sigs = append(sigs, sig)
	}
	if err := s.reportRows(ctx, tx, unmapped, untrusted); err != nil {
		return nil, st, err
	}
	if err := postgres.NoteBirthsTx(ctx, tx, named); err != nil {
		return nil, st, err
	}
	var co coalesced
	if len(births) > 0 {
		plan := planOf(ctx, rset, births)
		if plan != nil {
			s.plansTaken.Add(1)
		} else {
			anchors, err := s.anchors(ctx, tx, births)
			if err != nil {
				return nil, st, err
			}
			plan = s.planBirths(rset, births, anchors)
		}
		if err := s.mapBirths(ctx, tx, rset, plan); err != nil {
			return nil, st, err
		}
		st.Untrusted += len(plan.untrusted)
		if len(sigs) == 0 {
			co = plan.coalesced
		}
		sigs = append(sigs, plan.sigs...)
	}
	if co.marks == nil {
		co = coalesce(sigs)
	}
	for _, sig := range sigs {
		st.Kinds[string(sig.kind)]++
	}
	marked, err := postgres.MarkChangesTx(ctx, tx, co.marks, co.bornIn)
	if err != nil {
		return nil, st, err
	}
	st.Dirtied += int64(len(marked))
	st.marked = marked
	// After the dirty marks (candidate rows, then queued objects: the order a scan's pass takes them in).
	if err := s.queueObjects(ctx, tx, &trusted, births, sigs); err != nil {
		return nil, st, err
	}
	st.Signals = len(sigs)
	if err := s.emitHandoffs(ctx, tx, sigs, &st); err != nil {
		return nil, st, err
	}
	return failures, st, nil
}

// birthsBehind is, per group key, the births behind the page's mark of it: those of every signal naming it, or
// none (absent) when a signal without births names it too (a change no count of births settles: settled by time).
// The signals of one base group name its groups in every scope with one slice (planBirths), so the births are
// gathered per slice, and a group only that slice names shares the slice's list: MarkChangesTx writes a shared
// list out once for all of them.
func birthsBehind(sigs []*signal) map[string][]int64 {
	lists := map[*string][]int64{} // births per slice of groups, by its first element
	namedBy := map[string][]*string{}
	timed := map[string]bool{}
	for _, sig := range sigs {
		if len(sig.groups) == 0 {
			continue
		}
		id := &sig.groups[0]
		if _, ok := lists[id]; !ok {
			for _, g := range sig.groups {
				namedBy[g] = append(namedBy[g], id)
			}
		}
		lists[id] = append(lists[id], sig.births...)
		if len(sig.births) == 0 {
			for _, g := range sig.groups {
				timed[g] = true
			}
		}
	}
	out := make(map[string][]int64, len(namedBy))
	for g, ids := range namedBy {
		switch {
		case timed[g]:
		case len(ids) == 1:
			out[g] = lists[ids[0]]
		default:
			var all []int64
			for _, id := range ids {
				all = append(all, lists[id]...)
			}
			out[g] = all
		}
	}
	return out
}

// queueObjectsSQL queues objects for the scan of their base (governance_object_pending); a queued object queued
// again moves to its newest base.
const queueObjectsSQL = `
INSERT INTO governance_object_pending AS p (collection_name, entity_code, object_class, source_registry, lifecycle_status)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[])
ON CONFLICT (collection_name, entity_code) DO UPDATE SET object_class = EXCLUDED.object_class,
    source_registry = EXCLUDED.source_registry, lifecycle_status = EXCLUDED.lifecycle_status, queued_at = now()`

// queueObjects queues, for the scan of their base, the page's objects whose rows a scan must judge one by one: a
// trusted birth (not an inherited child) of a class whose objects have rows under the current ruleset, and an
// object a change row names. The scan's pass then reads just their births (followObjects), never its whole base.
func (s *Stage) queueObjects(ctx context.Context, tx pgx.Tx, trusted *trustedSources, births []*postgres.TailRow, sigs []*signal) error {
	queued := map[[2]string]postgres.BirthBase{}
	for _, sig := range sigs {
		if sig.object != nil && sig.kind != gcos.ChangeObjectBorn {
			queued[[2]string{sig.coll, sig.code}] = *sig.object
		}
	}
	if len(births) > 0 {
		classes, err := s.objectRowClasses(ctx, tx)
		if err != nil {
			return err
		}
		for _, r := range births {
			if r.ParentCode == "" && classes[r.EntityType] && trusted.of(r.SourceSystem) {
				queued[[2]string{r.CollectionName, r.EntityCode}] = postgres.BirthBase{Class: r.EntityType, Coll: r.CollectionName, Status: r.Status}
			}
		}
	}
	if len(queued) == 0 {
		return nil
	}
	keys := slices.SortedFunc(maps.Keys(queued), func(a, b [2]string) int {
		if c := strings.Compare(a[0], b[0]); c != 0 {
			return c
		}
		return strings.Compare(a[1], b[1])
	})
	n := len(keys)
	colls, codes, cls, regs, sts := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, k := range keys {
		b := queued[k]
		colls[i], codes[i], cls[i], regs[i], sts[i] = k[0], k[1], b.Class, b.Coll, b.Status
	}
	if _, err := tx.Exec(ctx, queueObjectsSQL, colls, codes, cls, regs, sts); err != nil {
		return fmt.Errorf("queue objects for their scan: %w", err)
	}
	return nil
}

// objectRowClasses are the classes whose objects have rows under the current ruleset, read in tx (so a ruleset
// activated before it commits is the one it sees); none before anything was backfilled.
func (s *Stage) objectRowClasses(ctx context.Context, tx pgx.Tx) (map[string]bool, error) {
	var version string
	if err := tx.QueryRow(ctx, `SELECT ruleset_version FROM v_current_ruleset`).Scan(&version); errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	} else if err != nil {
		return nil, fmt.Errorf("read the current ruleset: %w", err)
	}
	rs, err := s.core.RulesetVersionVia(ctx, tx, version)
	if err != nil {
		return nil, err
	}
	classes := map[string]bool{}
	if !rs.Components.IsAbsent(gcos.ComponentCoverageProfile) {
		for _, p := range rs.Components.CoverageProfile {
			if gcos.ObjectRowClassReason(p, s.cfg.ObjectRiskClasses) != "" {
				classes[p.EntityType] = true
			}
		}
	}
	return classes, nil
}

// coalesced is a page's signals as dirty marks: one per (group, reason), however many rows touched the group, with
// the births behind each group's mark (a pending mark is settled by a count that read them).
type coalesced struct {
	marks  map[string][]string // group keys by reason, in key order
	bornIn map[string][]int64
}

// coalesce turns a page's signals into its dirty marks.
func coalesce(sigs []*signal) coalesced {
	byReason := map[string]map[string]bool{}
	for _, sig := range sigs {
		reason := gcos.DirtyReasonFor(sig.kind)
		if byReason[reason] == nil {
			byReason[reason] = map[string]bool{}
		}
		for _, g := range sig.groups {
			byReason[reason][g] = true
		}
	}
	co := coalesced{marks: make(map[string][]string, len(byReason)), bornIn: birthsBehind(sigs)}
	for reason, keys := range byReason {
		co.marks[reason] = slices.Sorted(maps.Keys(keys))
	}
	return co
}

// birthInvalid says why a birth cannot be handed off, or nil.
func birthInvalid(r *postgres.TailRow) error {
	if r.EntityType == "" || r.CollectionName == "" || r.EntityCode == "" || r.Status == "" {
		return gcos.Errorf(gcos.EINVALID, "birth %d: class, collection, code and status are required", r.ID)
	}
	return nil
}

// birthPlan is what a page of births becomes, worked out from its rows and the registries alone: what it adds to
// the kept counts, its groups in every scope, its signals and their dirty marks. The page's transaction then only
// writes it. A page read ahead is planned while the page before is applied (readahead.go).
type birthPlan struct {
	rset      *registrySet
	births    []*postgres.TailRow
	anchors   map[[2]string]postgres.BirthBase
	counts    *postgres.PageCounts
	groups    []gcos.Group                 // with the page's trusted births per base group as member counts
	trusted   map[postgres.BirthBase]int64 // trusted births per base group
	untrusted []*postgres.TailRow
	sigs      []*signal
	coalesced coalesced
}

// planBirths resolves each birth's group (its anchor's, for an inherited child) in every scope and makes one signal
// per (base group, id bucket, source system): each key is a function of one row alone, so however a replay splits
// the rows into pages it produces exactly the keys the first delivery did, and the signal key table deduplicates
// them. Births from an untrusted source system dirty nothing and signal nothing: they are quarantined
// (quarantineUntrusted) and cannot inject governance work until their source is trusted.
func (s *Stage) planBirths(rset *registrySet, births []*postgres.TailRow, anchors map[[2]string]postgres.BirthBase) *birthPlan {
	plan := &birthPlan{rset: rset, births: births, anchors: anchors, counts: postgres.CountPage(births, anchors),
		trusted: map[postgres.BirthBase]int64{}}
	type sigKey struct {
		base   postgres.BirthBase
		bucket int64
		source string
	}
	bucket := max(s.cfg.Intake.SignalBucket, 1)
	table := s.core.BirthBinding().Table
	trusted := trustedSources{cfg: &s.cfg.Intake}
	sigs := map[sigKey]*signal{}
	var order []sigKey
	var bases []postgres.BirthBase
	for _, r := range births {
		b := postgres.BirthBase{Class: r.EntityType, Coll: r.CollectionName, Status: r.Status}
		if r.ParentCode != "" {
			if a, ok := anchors[[2]string{r.CollectionName, r.ParentCode}]; ok {
				b = a
			}
		}
		if !trusted.of(r.SourceSystem) {
			plan.untrusted = append(plan.untrusted, r)
			continue
		}
		if _, ok := plan.trusted[b]; !ok {
			bases = append(bases, b)
		}
		plan.trusted[b]++
		k := sigKey{b, r.ID / bucket, r.SourceSystem}
		if sig, ok := sigs[k]; ok {
			if r.ID < sig.firstID {
				sig.firstID = r.ID
			}
			sig.births = append(sig.births, r.ID)
			continue
		}
		sigs[k] = &signal{kind: gcos.ChangeObjectBorn, subject: b.Coll, coll: r.CollectionName, code: r.EntityCode,
			actor: cmp.Or(r.ActorRef, "unknown"), source: cmp.Or(r.SourceSystem, table), firstID: r.ID,
			occurred: r.TS, table: table, objectTyp: b.Class, births: []int64{r.ID}}
		order = append(order, k)
	}
	keysOf := make(map[postgres.BirthBase][]string, len(bases))
	for _, b := range bases {
		for _, g := range rset.groupsOf(b) {
			g.MemberCount = plan.trusted[b]
			plan.groups = append(plan.groups, g)
			keysOf[b] = append(keysOf[b], g.Key)
		}
	}
	plan.sigs = make([]*signal, 0, len(order))
	for _, k := range order {
		sigs[k].groups = keysOf[k.base]
		plan.sigs = append(plan.sigs, sigs[k])
	}
	plan.coalesced = coalesce(plan.sigs)
	return plan
}

type birthPlanKey struct{}

// withBirthPlan hands the plan of a page read ahead to its apply step.
func withBirthPlan(ctx context.Context, plan *birthPlan) context.Context {
	return context.WithValue(ctx, birthPlanKey{}, plan)
}

// planOf is the plan handed to ctx, if it was made for these births (the same rows, none of them failed or added
// by the sweep) with these registries; nil otherwise (the apply plans the page itself).
func planOf(ctx context.Context, rset *registrySet, births []*postgres.TailRow) *birthPlan {
	plan, _ := ctx.Value(birthPlanKey{}).(*birthPlan)
	if plan == nil || plan.rset != rset || len(plan.births) != len(births) || len(births) == 0 ||
		plan.births[0] != births[0] || plan.births[len(births)-1] != births[len(births)-1] {
		return nil
	}
	return plan
}

// mapBirths writes a page's births plan in its transaction: the kept counts, new groups, and the quarantine of
// births from untrusted source systems.
func (s *Stage) mapBirths(ctx context.Context, tx pgx.Tx, rset *registrySet, plan *birthPlan) error {
	if err := s.core.KeepCounts(ctx, tx, plan.counts); err != nil {
		return err
	}
	if err := s.recordNewGroups(ctx, tx, plan.groups); err != nil {
		return err
	}
	return s.quarantineUntrusted(ctx, tx, rset.regs, plan.untrusted, plan.anchors, plan.trusted)
}

// anchors looks up the parents of inherited children: (collection, parent_code) → the anchor's base group.
func (s *Stage) anchors(ctx context.Context, tx pgx.Tx, births []*postgres.TailRow) (map[[2]string]postgres.BirthBase, error) {
	var colls, codes []string
	seen := map[[2]string]bool{}
	for _, r := range births {
		k := [2]string{r.CollectionName, r.ParentCode}
		if r.ParentCode != "" && !seen[k] {
			seen[k] = true
			colls, codes = append(colls, r.CollectionName), append(codes, r.ParentCode)
		}
	}
	out := map[[2]string]postgres.BirthBase{}
	if len(colls) == 0 {
		return out, nil
	}
	b := s.core.BirthBinding()
	rows, err := tx.Query(ctx, b.SQL(`SELECT p.{coll}, p.{code}, p.{type}, p.{status} FROM {t} p
		JOIN unnest($1::text[], $2::text[]) AS k(coll, code) ON p.{coll} = k.coll AND p.{code} = k.code`), colls, codes)
	if err != nil {
		return nil, fmt.Errorf("resolve anchors: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var coll, code, class, status string
		if err := rows.Scan(&coll, &code, &class, &status); err != nil {
			return nil, err
		}
		out[[2]string{coll, code}] = postgres.BirthBase{Class: class, Coll: coll, Status: status}
	}
	return out, rows.Err()
}

// recordNewGroups adds groups the registry has not seen and leaves known ones alone; member counts (and
// last_seen_at) are the snapshot's truth, never touched per signal, so a replay changes nothing. Keys this process
// already knows to be recorded are not sent again.
func (s *Stage) recordNewGroups(ctx context.Context, tx pgx.Tx, groups []gcos.Group) error {
	groups = s.unknownGroups(groups)
	if len(groups) == 0 {
		return nil
	}
	// New keys in group-key order, in one statement, before any candidate row is locked (postgres.LockOrder).
	slices.SortFunc(groups, func(a, b gcos.Group) int { return strings.Compare(a.Key, b.Key) })
	n := len(groups)
	keys, classes, regs, axes, scopes, lifecycles, owners := make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	counts := make([]int64, n)
	for i, g := range groups {
		keys[i], classes[i], regs[i], axes[i], scopes[i], lifecycles[i], owners[i] = g.Key, g.ObjectClass, g.SourceRegistry, g.AxisFamily, g.Scope, g.LifecycleStatus, g.OwnerScope
		counts[i] = g.MemberCount
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO governance_group (group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, member_count, depends_on, first_seen_at)
		SELECT u.k, u.c, u.r, u.a, u.s, u.l, u.o, u.n,
		       jsonb_build_object('collections', jsonb_build_array(u.r), 'rule_scopes', jsonb_build_array(u.s), 'axis_families', CASE WHEN u.a IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(u.a) END),
		       clock_timestamp() -- after the change that names it was read: a full audit credits the change to it
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[]) AS u(k, c, r, a, s, l, o, n)
		ON CONFLICT (group_key) DO NOTHING
		RETURNING group_key`, keys, classes, regs, axes, scopes, lifecycles, owners, counts)
	if err != nil {
		return fmt.Errorf("record groups: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("record groups: %w", err)
	}
	// A key that was not inserted was already committed (a concurrent insert of it was waited for): it is known
	// from now on. Keys inserted here are known only once this transaction commits, so they are sent again next
	// time, which costs one conflict.
	fresh := make(map[string]bool, len(inserted))
	for _, k := range inserted {
		fresh[k] = true
	}
	var known []string
	for _, k := range keys {
		if !fresh[k] {
			known = append(known, k)
		}
	}
	s.rememberGroups(known)
	return nil
}

// ownAuditRows are the ids among the page's changelog rows that GCOS itself wrote (governance_audit_row).
func ownAuditRows(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow, birthSource string) (map[int64]bool, error) {
	var ids []int64
	for i := range rows {
		if rows[i].Source != birthSource {
			ids = append(ids, rows[i].ID)
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	found, err := tx.Query(ctx, `SELECT changelog_id FROM governance_audit_row WHERE changelog_id = ANY($1)`, ids)
	if err != nil {
		return nil, fmt.Errorf("recognise own audit rows: %w", err)
	}
	own, err := pgx.CollectRows(found, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("recognise own audit rows: %w", err)
	}
	out := make(map[int64]bool, len(own))
	for _, id := range own {
		out[id] = true
	}
	return out, nil
}

// rowReport is what a page saw of one (source, value): how many rows and the first few ids.
type rowReport struct {
	source, value string
	rows          int
	sample        []int64
}

// rowReports collects rows the intake refuses to act on, per (source, value), in the order first seen.
type rowReports []*rowReport

func (rr *rowReports) add(source, value string, id int64) {
	for _, r := range *rr {
		if r.source == source && r.value == value {
			r.rows++
			if len(r.sample) < 10 {
				r.sample = append(r.sample, id)
			}
			return
		}
	}
	*rr = append(*rr, &rowReport{source: source, value: value, rows: 1, sample: []int64{id}})
}

// reportRows raises one coalesced finding per (source, value) for rows no mapping rule matches
// (handoff_unmapped_row) and changelog rows from an untrusted source (input.untrusted_source), and counts them on
// the source's cursor. Such rows dirty nothing and emit nothing, but they are never silent.
func (s *Stage) reportRows(ctx context.Context, tx pgx.Tx, unmapped, untrusted rowReports) error {
	// Counts first: the one lock order (cursor row, then finding keys) a poll also follows.
	for _, r := range unmapped {
		if err := countRows(ctx, tx, r.source, "unmapped_rows", r.rows); err != nil {
			return err
		}
	}
	for _, r := range untrusted {
		if err := countRows(ctx, tx, r.source, "untrusted_rows", r.rows); err != nil {
			return err
		}
	}
	for _, r := range unmapped {
		if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueHandoffUnmappedRow, Subject: r.source + ":" + r.value,
			Evidence: map[string]any{"source": r.source, "entity_type/action": r.value, "rows": r.rows, "sample_ids": r.sample,
				"fix": "add a rule to intake.changelog_kinds (a change kind, or \"skip\" to ignore such rows deliberately)"}}); err != nil {
			return err
		}
	}
	for _, r := range untrusted {
		if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.InputIssue(gcos.InputUntrustedSource), Subject: r.source + ":" + r.value,
			Evidence: map[string]any{"source": r.source, "changed_by": r.value, "rows": r.rows, "sample_ids": r.sample,
				"trusted_sources": s.cfg.Intake.TrustedSources}}); err != nil {
			return err
		}
	}
	return nil
}

// countRows adds n to one of a source cursor's row counters (unmapped_rows, untrusted_rows).
func countRows(ctx context.Context, tx pgx.Tx, source, counter string, n int) error {
	if _, err := tx.Exec(ctx, `UPDATE gov_worker_cursor SET `+counter+` = `+counter+` + $2 WHERE source = $1`, source, n); err != nil {
		return fmt.Errorf("count %s of %s: %w", counter, source, err)
	}
	return nil
}

// emitHandoffs emits one governance.handoff.<kind> signal per coalesced change and id bucket: a base group's births
// (whose groups in every scope it names by the first), or a changelog subject. The correlation id is built from the
// bucket, so a replay of the same rows produces the same ids and emits nothing new.
func (s *Stage) emitHandoffs(ctx context.Context, tx pgx.Tx, sigs []*signal, st *HandoffStats) error {
	bucket := max(s.cfg.Intake.SignalBucket, 1)
	seen := make(map[[3]string]bool, len(sigs))
	es := make([]postgres.Emit, 0, min(len(sigs), emitChunk))
	// A signal already emitted for its bucket (an earlier page, a replay) is a duplicate and writes nothing.
	flush := func() error {
		results, err := postgres.EmitSignals(ctx, tx, es)
		if err != nil {
			return fmt.Errorf("emit handoff signals: %w", err)
		}
		for _, res := range results {
			switch res.Outcome {
			case postgres.EmitOutcomeEmitted:
				st.Emitted++
			case postgres.EmitOutcomeCaptured:
				st.Captured++
			}
		}
		es = es[:0]
		return nil
	}
	for _, sig := range sigs {
		subject := sig.subject
		if len(sig.groups) > 0 && sig.kind == gcos.ChangeObjectBorn {
			subject = sig.groups[0]
		}
		corr := fmt.Sprintf("%s:%s:%s:%d", sig.table, sig.kind, subject, sig.firstID/bucket)
		// Many rows of a page share a signal (same kind, subject and bucket): build each one once.
		k := [3]string{sig.source, sig.kind.EventType(), corr}
		if seen[k] {
			continue
		}
		seen[k] = true
		payload := map[string]any{"change_kind": string(sig.kind), "source": sig.table, "occurred_at": sig.occurred.UTC().Format(time.RFC3339Nano),
			"object_type": sig.objectTyp, "collection_name": cmp.Or(sig.coll, sig.subject), "count": len(sig.groups)}
		if len(sig.groups) > 0 {
			payload["group_key"] = sig.groups[0]
		}
		es = append(es, postgres.Emit{EventType: sig.kind.EventType(), SubjectTable: sig.table, SubjectRef: sig.subject,
			CollectionName: cmp.Or(sig.coll, sig.table), EntityCode: cmp.Or(sig.code, sig.subject), ActorRef: sig.actor,
			SourceSystem: sig.source, CorrelationID: corr,
			OccurredAt: sig.occurred, Payload: payload})
		if len(es) == emitChunk {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if len(es) == 0 {
		return nil
	}
	return flush()
}

// emitChunk bounds the signals emitted per statement, so a page of one-signal-per-row changes (a registry history)
// does not build one huge statement in memory.
const emitChunk = 2_000
