package oracle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/gate"
	"gcos/postgres"
)

// Mismatch is one place where the incremental state differs from the reference.
type Mismatch struct {
	Kind        string `json:"kind"` // group, object, ledger, gate or gate_view (the view differs from the database)
	Key         string `json:"key"`  // group key, candidate key, scope or object reference
	Scope       string `json:"scope,omitempty"`
	Collection  string `json:"collection,omitempty"` // where it is (none for a ledger)
	Field       string `json:"field"`
	Incremental string `json:"incremental"`
	Reference   string `json:"reference"`
}

func (m Mismatch) String() string {
	scope := ""
	if m.Scope != "" {
		scope = " [" + m.Scope + "]"
	}
	return fmt.Sprintf("%s %s%s %s: incremental %s, reference %s", m.Kind, m.Key, scope, m.Field, m.Incremental, m.Reference)
}

// Report is the outcome of one verification.
type Report struct {
	At             time.Time `json:"at"`
	RulesetVersion string    `json:"ruleset_version"`
	Only           []string  `json:"collections,omitempty"` // the slice verified (none: everything)
	Births         int64     `json:"births"`                // births counted (in the slice's collections)
	Groups         int       `json:"groups"`                // reference groups (with members)
	Objects        int       `json:"objects"`               // reference object rows
	GateChecks     int       `json:"gate_checks"`           // gate decisions compared (objects × actions)
	ViewChecks     int       `json:"view_checks,omitempty"` // of those, answered by the gate's view too and compared
	BatchChecks    int       `json:"batch_checks"`          // gate decisions compared again as batches (each from one instant)
	EvaluateTime   float64   `json:"evaluate_secs"`         // reading the substrate and evaluating it from scratch
	Elapsed        float64   `json:"elapsed_secs"`          // the whole verification
	Batches        int       `json:"batches,omitempty"`     // an audit's proof: the batches it was read in
	// Mismatches are the differences of what was settled at the instant; InFlight those of what was still moving
	// (VerifyOptions.InFlight): a group dirty at the instant, or one a transaction that committed after it wrote
	// (a handoff, a mark, a scan), and what those groups count or decide.
	Mismatches []Mismatch `json:"mismatches"`
	InFlight   []Mismatch `json:"in_flight,omitempty"`
	// Moving counts the groups and objects that were in flight (VerifyOptions.InFlight).
	Moving *Moving `json:"moving,omitempty"`
	// NotHandedOff says why rows committed before the instant may not all have been handed off when what moved was
	// read (Settle failed): what they move is unknown. Their differences count as settled (fail closed: gcos verify
	// may run with no intake at all), unless Settle's error is ErrBehind (the intake runs and is only behind): the
	// proof is then Inconclusive and lists every difference in flight, since a row still waiting may move anything.
	NotHandedOff string `json:"not_handed_off,omitempty"`
	Inconclusive bool   `json:"inconclusive,omitempty"`
}

// Moving is what was in flight during a live verification.
type Moving struct {
	DirtyGroups   int `json:"dirty_groups"`   // marked dirty at the instant
	WrittenGroups int `json:"written_groups"` // written by transactions that committed after the instant
	Objects       int `json:"objects"`        // object rows and births written after it
}

// Clean reports whether the incremental state equals the reference everywhere it was compared, in flight or not.
func (r Report) Clean() bool { return len(r.Mismatches) == 0 && len(r.InFlight) == 0 }

// Settled reports whether everything that was settled at the instant agrees (differences in flight aside).
func (r Report) Settled() bool { return len(r.Mismatches) == 0 }

// VerifyOptions say what to compare.
type VerifyOptions struct {
	Sample int      // about how many births are drawn at random for the gate beyond those with object rows (both actions each)
	Seed   uint64   // picks the sample
	Also   []string // objects (collection:code) the gate is asked about in any case, e.g. those just changed
	// Only limits the verification to the groups of these collections, their object rows and their births (a slice
	// of the full audit's rotating cover); nil verifies everything, the ledger included. A group's members are all
	// in its registry's collection (a child's anchor is in its own), so a slice is counted from that alone.
	Only []string
	// GateLimit caps the objects the gate is asked about (0: every object with a row, the sample and Also).
	GateLimit int
	// Gate is the gate asked (nil: one built over the store, reading the database).
	Gate *gate.Gate
	// View, when set, is caught up before the gate is asked and answers every gate question too: its answer must be
	// the database's, field by field (view == database == reference).
	View *gate.VerdictView
	// InFlight separates, on a live system, the differences of what was still moving at the instant (see
	// Report.Mismatches) from the settled ones. Settle, when set, is called first: it returns once every source row
	// committed before the instant has been handed off, so that the groups those rows move are known.
	InFlight bool
	Settle   func(ctx context.Context, at time.Time) error
	// BatchObjects bounds the object rows one batch of AuditVerify holds (the scan stage's
	// scan.verify_batch_objects); 0: the whole slice in one batch.
	BatchObjects int64
}

// ErrBehind marks a Settle error that says the intake runs (in the caller's process) but has not handed off what
// the instant held yet, rather than that no intake may be running: the proof is then Inconclusive.
var ErrBehind = errors.New("the intake runs but is behind")

// ReferenceOf reads the whole substrate in one REPEATABLE READ transaction and evaluates it under the active ruleset.
func ReferenceOf(ctx context.Context, store *postgres.Store) (*Reference, error) {
	return evaluateIn(ctx, store, ReadOptions{}, nil)
}

// ReferenceAlso is ReferenceOf that also reads these objects (collection:code) one by one, so Reference.Gate can
// judge each of them.
func ReferenceAlso(ctx context.Context, store *postgres.Store, objects []string) (*Reference, error) {
	return evaluateIn(ctx, store, ReadOptions{Also: objects}, nil)
}

// Verify compares the store's incremental state with the reference at one instant: every group with members,
// every object row and every scope's ledger (or, with opts.Only, those of a slice) are read in the transaction that
// reads the substrate; the gate is then asked (without follow-ups) about every object with a row and a sample of
// the others, for write and read.
func Verify(ctx context.Context, store *postgres.Store, opts VerifyOptions) (Report, error) {
	var inc incremental
	var snapshot string // the instant's pg_current_snapshot(): what committed after it is in flight
	start := time.Now()
	ref, err := evaluateIn(ctx, store, ReadOptions{Only: opts.Only, Sample: opts.Sample, Seed: opts.Seed, Also: opts.Also},
		func(tx pgx.Tx) ([]string, error) {
			if err := tx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&snapshot); err != nil {
				return nil, fmt.Errorf("verify: snapshot: %w", err)
			}
			var err error
			inc, err = readIncremental(ctx, tx, opts.Only)
			return inc.objectRefs, err
		})
	if err != nil {
		return Report{}, err
	}
	rep := Report{At: ref.At, RulesetVersion: ref.RulesetVersion, Only: opts.Only, Births: ref.Births, Groups: len(ref.Groups),
		Objects: len(ref.Objects), EvaluateTime: time.Since(start).Seconds(), Mismatches: []Mismatch{}}
	rep.Mismatches = append(rep.Mismatches, compareGroups(ref, inc)...)
	rep.Mismatches = append(rep.Mismatches, compareObjects(ref, inc)...)
	if opts.Only == nil {
		rep.Mismatches = append(rep.Mismatches, compareLedgers(ref, inc)...)
	}

	// The gate: every birth read one by one (those that may have an object row, and the sample), every object the
	// incremental state holds a row for, and Also (within the slice).
	objects := slices.Clone(ref.ObjectRefs())
	objects = append(objects, inc.objectRefs...)
	collections := map[string]string{} // where each object is: its birth's collection, else its row's
	for _, o := range inc.objects {
		collections[o.ref] = o.collection
	}
	for obj, p := range ref.placed {
		collections[obj] = ref.sub.Births[p.birth].Collection
	}
	for _, obj := range opts.Also {
		if _, placed := ref.placed[obj]; placed || opts.Only == nil {
			objects = append(objects, obj)
		}
	}
	sort.Strings(objects)
	objects = slices.Compact(objects)
	if opts.GateLimit > 0 && len(objects) > opts.GateLimit {
		rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
		rng.Shuffle(len(objects), func(i, j int) { objects[i], objects[j] = objects[j], objects[i] })
		objects = objects[:opts.GateLimit]
	}
	if opts.View != nil {
		if err := opts.View.CatchUp(ctx); err != nil {
			return rep, err
		}
	}
	g := opts.Gate
	if g == nil {
		g = gate.New(store, nil)
	}
	for _, obj := range objects {
		for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
			want := ref.Gate(obj, action)
			got := g.Decide(ctx, obj, action)
			rep.GateChecks++
			if opts.View != nil {
				if m, answered := compareView(obj, action, got, opts.View.Decide(ctx, obj, action)); m != nil {
					m.Collection = collections[obj]
					rep.Mismatches = append(rep.Mismatches, *m)
				} else if answered {
					rep.ViewChecks++
				}
			}
			if got.Decision != want.Decision {
				rep.Mismatches = append(rep.Mismatches, Mismatch{Kind: "gate", Key: obj, Collection: collections[obj], Field: action,
					Incremental: fmt.Sprintf("%s (%s: %s)", got.Decision, got.EffectiveVerdict, first(got.Reasons)),
					Reference:   fmt.Sprintf("%s (%s: %s)", want.Decision, want.EffectiveVerdict, first(want.Reasons))})
			}
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	// The same questions as batches of gate.batch_max, each answered from one instant: every decision the
	// reference's (the database's; with a view attached, the view's too).
	checks := make([]gcos.GateCheck, 0, 2*len(objects))
	for _, obj := range objects {
		checks = append(checks, gcos.GateCheck{Object: obj, Action: gcos.ActionWrite}, gcos.GateCheck{Object: obj, Action: gcos.ActionRead})
	}
	batchOpts := []gate.GateOptions{{Consistency: gate.ConsistencyFull}}
	if opts.View != nil {
		batchOpts = append(batchOpts, gate.GateOptions{})
	}
	for lo, size := 0, store.Config().Gate.BatchMax; lo < len(checks); lo += size {
		chunk := checks[lo:min(lo+size, len(checks))]
		for _, bo := range batchOpts {
			res := g.DecideBatch(ctx, chunk, bo)
			for i, got := range res.Results {
				want := ref.Gate(chunk[i].Object, chunk[i].Action)
				if got.Decision != want.Decision {
					rep.Mismatches = append(rep.Mismatches, Mismatch{Kind: "gate_batch", Key: chunk[i].Object, Collection: collections[chunk[i].Object],
						Field: chunk[i].Action, Incremental: fmt.Sprintf("%s from %s (%s: %s)", got.Decision, orDash(res.Source), got.EffectiveVerdict, first(got.Reasons)),
						Reference: fmt.Sprintf("%s (%s: %s)", want.Decision, want.EffectiveVerdict, first(want.Reasons))})
				}
			}
			rep.BatchChecks += len(chunk)
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	if opts.InFlight {
		if err := separateInFlight(ctx, store, opts, ref, inc, snapshot, &rep); err != nil {
			return rep, err
		}
	}
	rep.Elapsed = time.Since(start).Seconds()
	return rep, nil
}

// separateInFlight moves the differences of what was moving at the instant from rep.Mismatches to rep.InFlight.
// What moved is the product's own record: the groups dirty at the instant, and the keys that transactions committed
// after it noted in gcos_change_feed (every write to a table the gate reads is noted there, with its transaction id).
// A group rewritten after the instant by a periodic scan counts as moving too: its difference is listed apart, not
// hidden, and the next verification judges it settled.
func separateInFlight(ctx context.Context, store *postgres.Store, opts VerifyOptions, ref *Reference, inc incremental, snapshot string, rep *Report) error {
	if opts.Settle != nil {
		if err := opts.Settle(ctx, ref.At); err != nil {
			if ctx.Err() != nil {
				return err
			}
			rep.NotHandedOff = err.Error()
			rep.Inconclusive = errors.Is(err, ErrBehind)
		}
	}
	groups, objects := map[string]bool{}, map[string]bool{}
	var dirty int
	for k, g := range inc.groups {
		if g.dirty {
			groups[k] = true
			dirty++
		}
	}
	for _, k := range inc.unseeded {
		groups[k] = true
		dirty++
	}
	var prunedPast bool
	err := store.Pool().QueryRow(ctx, `SELECT pruned_below > pg_snapshot_xmin($1::pg_snapshot) FROM gcos_change_feed_horizon`,
		snapshot).Scan(&prunedPast)
	if err != nil {
		return fmt.Errorf("verify: change feed horizon: %w", err)
	}
	if prunedPast {
		return gcos.Errorf(gcos.ECONFLICT, "verify: the change feed was pruned past the instant while verifying; run it again")
	}
	rows, err := store.Pool().Query(ctx, `SELECT DISTINCT kind, key FROM gcos_change_feed
		WHERE xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)
		  AND kind IN ('group', 'state', 'object', 'birth')`, snapshot)
	if err != nil {
		return fmt.Errorf("verify: read what moved: %w", err)
	}
	written := 0
	for rows.Next() {
		var kind, key string
		if err := rows.Scan(&kind, &key); err != nil {
			rows.Close()
			return fmt.Errorf("verify: read what moved: %w", err)
		}
		if kind == "group" || kind == "state" {
			if !groups[key] {
				written++
			}
			groups[key] = true
		} else {
			objects[key] = true
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("verify: read what moved: %w", err)
	}
	rep.Moving = &Moving{DirtyGroups: dirty, WrittenGroups: written, Objects: len(objects)}

	// A group whose members are moving is in flight with every group of its base and scope: the one they left and
	// the one they join.
	places := map[groupPlace]bool{}
	for k := range groups {
		if g, ok := inc.groups[k]; ok {
			places[g.place()] = true
		}
		if g, ok := ref.Groups[k]; ok {
			places[g.place()] = true
		}
	}
	for _, p := range inc.unseededAt {
		places[p] = true
	}
	// A group written after the instant that neither side counts members in (one retired, or recorded, then) is
	// placed through the registry: a group's place never changes.
	var unplaced []string
	for k := range groups {
		_, inInc := inc.groups[k]
		_, inRef := ref.Groups[k]
		if !inInc && !inRef {
			unplaced = append(unplaced, k)
		}
	}
	if len(unplaced) > 0 {
		reg, err := postgres.GroupsByKey(ctx, store.Pool(), unplaced)
		if err != nil {
			return fmt.Errorf("verify: place what moved: %w", err)
		}
		for _, g := range reg {
			places[groupPlace{deref(g.ObjectClass), deref(g.SourceRegistry), deref(g.LifecycleStatus), deref(g.Scope)}] = true
		}
	}
	for k, g := range inc.groups {
		if places[g.place()] {
			groups[k] = true
		}
	}
	for k, g := range ref.Groups {
		if places[g.place()] {
			groups[k] = true
		}
	}
	scopes := map[string]bool{} // a scope's ledger moves with any of its groups
	for k := range groups {
		if g, ok := inc.groups[k]; ok {
			scopes[g.scope] = true
		}
		if g, ok := ref.Groups[k]; ok && g.Scope != nil {
			scopes[*g.Scope] = true
		}
	}
	objectMoving := func(obj string) bool {
		if objects[obj] {
			return true
		}
		for _, g := range ref.placed[obj].groups {
			if groups[g] {
				return true
			}
		}
		return false
	}
	candidateMoving := func(key string) bool {
		for _, o := range []string{inc.objects[key].ref, refObject(ref, key).Ref} {
			if o != "" && objectMoving(o) {
				return true
			}
		}
		return groups[inc.objects[key].groupKey] || groups[refObject(ref, key).GroupKey]
	}
	// An inconclusive proof (no cut: the intake runs but is behind) does not know what the rows still waiting move,
	// so it judges nothing settled; a proof taken once the intake has caught up judges it.
	settled := rep.Mismatches[:0:0]
	for _, m := range rep.Mismatches {
		var moving bool
		switch m.Kind {
		case "group":
			moving = groups[m.Key]
		case "object":
			moving = candidateMoving(m.Key)
		case "ledger":
			moving = scopes[m.Key]
		default: // gate, gate_batch, gate_view: asked after the instant
			moving = objectMoving(m.Key)
		}
		if moving || rep.Inconclusive {
			rep.InFlight = append(rep.InFlight, m)
		} else {
			settled = append(settled, m)
		}
	}
	rep.Mismatches = settled
	return nil
}

// refObject is the reference's object row of candidate key, or a zero one.
func refObject(ref *Reference, key string) Object {
	if o := ref.Objects[key]; o != nil {
		return *o
	}
	return Object{}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// compareView compares the view's answer with the database's; answered says the view (not a read-through) gave it.
func compareView(obj, action string, db, vw gate.GateResult) (m *Mismatch, answered bool) {
	summary := func(r gate.GateResult) string {
		return fmt.Sprintf("%s (%s: %s) %s", r.Decision, r.EffectiveVerdict, strings.Join(r.Reasons, "; "), r.Statement)
	}
	same := db.Decision == vw.Decision && db.EffectiveVerdict == vw.EffectiveVerdict && db.RiskClass == vw.RiskClass &&
		slices.Equal(db.Reasons, vw.Reasons) && db.Statement == vw.Statement && slices.Equal(db.Consulted, vw.Consulted)
	if !same {
		return &Mismatch{Kind: "gate_view", Key: obj, Field: action, Incremental: "view: " + summary(vw), Reference: "database: " + summary(db)}, false
	}
	return nil, vw.Source == gate.SourceView
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// evaluateIn reads the substrate (and, through also, anything else at the same instant, which may name more
// objects to read one by one) in one read-only REPEATABLE READ transaction, then evaluates it under the active
// ruleset's components.
func evaluateIn(ctx context.Context, store *postgres.Store, opts ReadOptions, also func(pgx.Tx) ([]string, error)) (*Reference, error) {
	cfg := store.Config()
	options := Options{ObjectRiskClasses: cfg.Gate.ObjectRiskClasses, LowRiskClasses: cfg.Gate.LowRiskClasses, TTL: cfg.TTL}
	// Which classes have object rows is the ruleset's to say, and the read needs it: the ruleset is read first and
	// the transaction then checks it is still the active one (an activation in between is retried).
	for attempt := 0; ; attempt++ {
		version, err := ActiveRuleset(ctx, store.Pool())
		if err != nil {
			return nil, fmt.Errorf("verify: %w", err)
		}
		if version == "" {
			return nil, gcos.Errorf(gcos.EUNAVAILABLE, "verify: no ruleset is active, so there is nothing to judge against")
		}
		rs, err := store.GetRuleset(ctx, version)
		if err != nil {
			return nil, fmt.Errorf("verify: ruleset %s: %w", version, err)
		}
		opts.RowClasses = RowClasses(rs.Components, options)
		sub, err := readAt(ctx, store, opts, also)
		if err != nil {
			return nil, err
		}
		if sub.RulesetVersion != version && attempt < 3 {
			continue
		}
		if sub.RulesetVersion != version {
			return nil, gcos.Errorf(gcos.ECONFLICT, "verify: the active ruleset keeps changing (%s, then %s)", version, sub.RulesetVersion)
		}
		return Evaluate(sub, rs.Version, rs.Components, options), nil
	}
}

// readAt reads the substrate, and what also reads, in one read-only REPEATABLE READ transaction.
func readAt(ctx context.Context, store *postgres.Store, opts ReadOptions, also func(pgx.Tx) ([]string, error)) (Substrate, error) {
	tx, err := store.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return Substrate{}, fmt.Errorf("verify: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, postgres.NoJIT); err != nil { // the incremental side reads the ledger's view
		return Substrate{}, fmt.Errorf("verify: %w", err)
	}
	if also != nil {
		more, err := also(tx)
		if err != nil {
			return Substrate{}, err
		}
		opts.Also = slices.Concat(opts.Also, more)
	}
	sub, err := Read(ctx, tx, store.Config().SourceBinding, store.BirthBinding().ObjectFingerprintSQL(), opts)
	if err != nil {
		return sub, fmt.Errorf("verify: read the substrate: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return sub, fmt.Errorf("verify: %w", err)
	}
	return sub, nil
}

// incremental is GCOS's state as its views present it, read at the reference's instant.
type incremental struct {
	groups     map[string]incGroup
	unseeded   []string     // groups with no member that are pending a scan (no candidate row yet, or dirty)
	unseededAt []groupPlace // where each of those is
	objects    map[string]incObject
	objectRefs []string
	ledgers    map[string]gcos.Ledger
}

type incGroup struct {
	class, lifecycle                                             string
	registry, scope, verdict, effective, quality, risk, coverage string
	required                                                     *bool
	members                                                      int64
	dirty                                                        bool
}

type incObject struct {
	ref, collection, reason, groupKey, scope, effective, quality, risk, coverage string
	required                                                                     bool
}

// groupPlace is where a group's members are: its base (class, collection, lifecycle) in one scope. A base's births
// are in one group per scope; while they move from one group to another (an owner or axis family changed) both
// groups are in flight.
type groupPlace struct{ class, registry, lifecycle, scope string }

func (g incGroup) place() groupPlace { return groupPlace{g.class, g.registry, g.lifecycle, g.scope} }

func (g *Group) place() groupPlace {
	return groupPlace{deref(g.ObjectClass), deref(g.SourceRegistry), deref(g.LifecycleStatus), deref(g.Scope)}
}

// readIncremental reads the incremental state at the transaction's instant: only the groups (and object rows of
// groups) of registries in only, unless it is nil.
func readIncremental(ctx context.Context, tx pgx.Tx, only []string) (incremental, error) {
	var slice any
	if only != nil {
		slice = only
	}
	inc := incremental{groups: map[string]incGroup{}, objects: map[string]incObject{}, ledgers: map[string]gcos.Ledger{}}
	// A group is live in the incremental state when it counts members: its candidate row's, or (never seeded) its
	// registry row's. A group with no candidate row is pending its first scan, as a dirty one is, and as one a
	// pending mark is owed to (its count may predate the change, postgres.ApplyPendingMarks).
	if err := each(ctx, tx, `SELECT e.group_key, coalesce(e.object_class, ''), coalesce(e.lifecycle_status, ''), coalesce(e.source_registry, ''),
			coalesce(e.scope, ''), coalesce(e.candidate_verdict, ''), e.effective_verdict,
			coalesce(e.input_quality_state, ''), coalesce(e.risk_class, ''), e.coverage_required, coalesce(e.coverage_outcome, ''),
			coalesce(e.member_count, e.group_member_count), coalesce(e.dirty, true) OR o.group_key IS NOT NULL
		FROM v_candidate_effective e
		LEFT JOIN v_pending_mark_owed o ON o.group_key = e.group_key AND o.ruleset_version = e.ruleset_version
		WHERE (coalesce(e.member_count, e.group_member_count) > 0 OR e.member_count IS NULL OR e.dirty OR o.group_key IS NOT NULL)
		  AND ($1::text[] IS NULL OR e.source_registry = ANY($1::text[]))`, func(r pgx.Rows) error {
		var key string
		var g incGroup
		if err := r.Scan(&key, &g.class, &g.lifecycle, &g.registry, &g.scope, &g.verdict, &g.effective, &g.quality, &g.risk, &g.required,
			&g.coverage, &g.members, &g.dirty); err != nil {
			return err
		}
		if g.members > 0 {
			inc.groups[key] = g
		} else {
			inc.unseeded = append(inc.unseeded, key)
			inc.unseededAt = append(inc.unseededAt, g.place())
		}
		return nil
	}, slice); err != nil {
		return inc, fmt.Errorf("verify: read candidate rows: %w", err)
	}
	if err := each(ctx, tx, `SELECT o.candidate_key, o.object_ref, coalesce(g.source_registry, ''), o.materialization_reason,
			o.group_key, coalesce(o.scope, ''), o.effective_verdict, coalesce(o.input_quality_state, ''), coalesce(o.risk_class, ''),
			o.coverage_required, coalesce(o.coverage_outcome, '')
		FROM v_candidate_object_effective o LEFT JOIN governance_group g ON g.group_key = o.group_key
		WHERE o.lifecycle_status = 'active' AND ($1::text[] IS NULL OR g.source_registry = ANY($1::text[]))`, func(r pgx.Rows) error {
		var key string
		var o incObject
		if err := r.Scan(&key, &o.ref, &o.collection, &o.reason, &o.groupKey, &o.scope, &o.effective, &o.quality, &o.risk, &o.required, &o.coverage); err != nil {
			return err
		}
		inc.objects[key] = o
		inc.objectRefs = append(inc.objectRefs, o.ref)
		return nil
	}, slice); err != nil {
		return inc, fmt.Errorf("verify: read object rows: %w", err)
	}
	if only != nil {
		return inc, nil // the ledger is the whole estate's
	}
	if err := each(ctx, tx, `SELECT scope, coalesce(total, 0), covered, orphans, approved_exceptions, retired_or_ignored,
			stale, deferred_birth, class_0 FROM v_invariant_ledger`, func(r pgx.Rows) error {
		var l gcos.Ledger
		if err := r.Scan(&l.Scope, &l.Total, &l.Covered, &l.Orphans, &l.ApprovedExceptions, &l.RetiredOrIgnored, &l.Stale,
			&l.DeferredBirth, &l.Class0); err != nil {
			return err
		}
		inc.ledgers[l.Scope] = l
		return nil
	}); err != nil {
		return inc, fmt.Errorf("verify: read the ledger: %w", err)
	}
	return inc, nil
}

// unionKeys lists the keys of both maps once, sorted.
func unionKeys[A, B any](a map[string]A, b map[string]B) []string {
	keys := slices.Collect(maps.Keys(a))
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func compareGroups(ref *Reference, inc incremental) []Mismatch {
	var out []Mismatch
	for _, k := range unionKeys(ref.Groups, inc.groups) {
		want, inRef := ref.Groups[k]
		got, inInc := inc.groups[k]
		diff := func(field, g, w string) {
			if g != w {
				scope, coll := got.scope, got.registry
				if inRef {
					scope, coll = deref(want.Scope), deref(want.SourceRegistry)
				}
				out = append(out, Mismatch{Kind: "group", Key: k, Scope: scope, Collection: coll, Field: field, Incremental: g, Reference: w})
			}
		}
		switch {
		case !inInc:
			diff("exists", "no", fmt.Sprintf("yes (%s, %d members)", want.Verdict, want.Members))
			continue
		case !inRef:
			diff("exists", fmt.Sprintf("yes (%s, %d members)", got.effective, got.members), "no")
			continue
		}
		effective := got.effective
		if effective != got.verdict {
			effective += " (stored " + got.verdict + ")"
		}
		diff("verdict", effective, string(want.Verdict))
		diff("member_count", strconv.FormatInt(got.members, 10), strconv.FormatInt(want.Members, 10))
		diff("input_quality_state", got.quality, want.InputQuality)
		diff("risk_class", got.risk, want.RiskClass)
		diff("coverage_required", boolText(got.required), boolText(&want.CoverageRequired))
		if want.Verdict == gcos.VerdictRelevant || got.verdict == string(gcos.VerdictRelevant) {
			diff("coverage", got.coverage, string(want.Coverage))
		}
	}
	return out
}

func compareObjects(ref *Reference, inc incremental) []Mismatch {
	var out []Mismatch
	for _, k := range unionKeys(ref.Objects, inc.objects) {
		want, inRef := ref.Objects[k]
		got, inInc := inc.objects[k]
		diff := func(field, g, w string) {
			if g != w {
				scope, coll := got.scope, got.collection
				if inRef {
					scope, coll = want.Scope, want.Collection
				}
				out = append(out, Mismatch{Kind: "object", Key: k, Scope: scope, Collection: coll, Field: field, Incremental: g, Reference: w})
			}
		}
		switch {
		case !inInc:
			diff("exists", "no", fmt.Sprintf("yes (%s, %s)", want.Reason, want.Verdict))
			continue
		case !inRef:
			diff("exists", fmt.Sprintf("yes (%s, %s)", got.reason, got.effective), "no")
			continue
		}
		diff("materialization_reason", got.reason, want.Reason)
		diff("group_key", got.groupKey, want.GroupKey)
		diff("verdict", got.effective, string(want.Verdict))
		diff("input_quality_state", got.quality, want.InputQuality)
		diff("risk_class", got.risk, want.RiskClass)
		diff("coverage_required", boolText(&got.required), boolText(&want.CoverageRequired))
		diff("coverage", got.coverage, string(want.Coverage))
	}
	return out
}

func compareLedgers(ref *Reference, inc incremental) []Mismatch {
	var out []Mismatch
	for _, scope := range ref.Scopes {
		want := ref.Ledgers[scope]
		got, ok := inc.ledgers[scope]
		if !ok {
			out = append(out, Mismatch{Kind: "ledger", Key: scope, Field: "exists", Incremental: "no", Reference: "yes"})
			continue
		}
		for _, f := range []struct {
			name     string
			got, ref int64
		}{
			{"total", got.Total, want.Total}, {"covered", got.Covered, want.Covered}, {"orphans", got.Orphans, want.Orphans},
			{"approved_exceptions", got.ApprovedExceptions, want.ApprovedExceptions},
			{"retired_or_ignored", got.RetiredOrIgnored, want.RetiredOrIgnored}, {"stale", got.Stale, want.Stale},
			{"deferred_birth", got.DeferredBirth, want.DeferredBirth}, {"class_0", got.Class0, want.Class0},
		} {
			if f.got != f.ref {
				out = append(out, Mismatch{Kind: "ledger", Key: scope, Field: f.name,
					Incremental: strconv.FormatInt(f.got, 10), Reference: strconv.FormatInt(f.ref, 10)})
			}
		}
	}
	for scope := range inc.ledgers {
		if !slices.Contains(ref.Scopes, scope) {
			out = append(out, Mismatch{Kind: "ledger", Key: scope, Field: "exists", Incremental: "yes", Reference: "no"})
		}
	}
	return out
}

func boolText(b *bool) string {
	if b == nil {
		return "null"
	}
	return strconv.FormatBool(*b)
}

// estateSubject is the verify_mismatch subject of a place that is in no one collection (a ledger).
const estateSubject = "incremental_state"

// AuditVerify is the full audit's verification of one turn of the rotating cover: Verify limited to the plan's
// collections, then, for each of them, a verify_mismatch finding (subject: the collection) naming how many places
// differ and the first of them, or the open one closed when nothing differs; and the proof recorded on the run, so
// the next audit proves the next slice. A collection's finding stays open until an audit proves it clean again:
// another slice's clean proof does not close it.
//
// The plan is proven in batches of about opts.BatchObjects object rows (gcos.ProofBatches), each read at
// its own instant and compared before the next is read, so the proof holds one batch's object rows whatever the
// size of the estate; a collection is always proven whole, at one instant. The batches share the gate sample.
//
// A batch that is Inconclusive (its intake runs but had not handed off what the batch's instant held) ends the
// proof there: the settled mismatches of the batches before it are raised, no finding is closed and no proof is
// recorded, so the next audit proves the same slice.
func AuditVerify(ctx context.Context, store *postgres.Store, runID string, plan CoverPlan, opts VerifyOptions) (Report, error) {
	budget := opts.BatchObjects
	if budget <= 0 {
		budget = math.MaxInt64
	}
	batches := gcos.ProofBatches(plan.Collections, plan.ObjectRows, budget)
	if len(batches) == 0 {
		batches = [][]string{{}} // an empty slice proves nothing, but is still a slice (never "everything")
	}
	share := func(n int) int {
		if n <= 0 {
			return n
		}
		return max(1, (n+len(batches)-1)/len(batches))
	}
	rep := Report{Only: plan.Collections, Mismatches: []Mismatch{}}
	for i, batch := range batches {
		one := opts
		one.Only, one.Sample, one.GateLimit = batch, share(opts.Sample), share(opts.GateLimit)
		one.Seed = opts.Seed + uint64(i)
		r, err := Verify(ctx, store, one)
		if err != nil {
			return rep, err
		}
		if i == 0 || r.At.Before(rep.At) {
			rep.At = r.At // the proof holds from the earliest instant read
		}
		rep.RulesetVersion = r.RulesetVersion
		rep.Births += r.Births
		rep.Groups += r.Groups
		rep.Objects += r.Objects
		rep.GateChecks += r.GateChecks
		rep.BatchChecks += r.BatchChecks
		rep.EvaluateTime += r.EvaluateTime
		rep.Elapsed += r.Elapsed
		rep.Batches++
		rep.Mismatches = append(rep.Mismatches, r.Mismatches...)
		rep.InFlight = append(rep.InFlight, r.InFlight...)
		if r.Inconclusive {
			rep.NotHandedOff, rep.Inconclusive = r.NotHandedOff, true
			break
		}
	}
	where := map[string][]Mismatch{}
	for _, m := range rep.Mismatches {
		subject := m.Collection
		if subject == "" {
			subject = estateSubject
		}
		where[subject] = append(where[subject], m)
	}
	for _, subject := range append(slices.Clone(plan.Collections), estateSubject) {
		ms := where[subject]
		if len(ms) == 0 {
			if rep.Inconclusive {
				continue // not proven clean
			}
			if _, err := store.ResolveFinding(ctx, gcos.IssueVerifyMismatch, subject, ""); err != nil {
				return rep, fmt.Errorf("verify: close verify_mismatch on %s: %w", subject, err)
			}
			continue
		}
		kinds := map[string]int{}
		var first []string
		for i, m := range ms {
			kinds[m.Kind+"."+m.Field]++
			if i < 20 {
				first = append(first, m.String())
			}
		}
		f := gcos.NewFinding(gcos.IssueVerifyMismatch, subject, runID, rep.RulesetVersion, map[string]any{
			"mismatches": len(ms), "by_field": kinds, "first": first, "verified_at": rep.At,
			"cover_slice": plan.Slice, "cover_slices": plan.Slices, "reproduce": "gcos verify",
		})
		if _, err := store.RaiseFinding(ctx, f); err != nil {
			return rep, fmt.Errorf("verify: raise verify_mismatch on %s: %w", subject, err)
		}
	}
	if rep.Inconclusive {
		return rep, nil
	}
	if err := recordProof(ctx, store, runID, CoverProof{Plan: plan, At: rep.At, Groups: rep.Groups, Objects: rep.Objects,
		GateChecks: rep.GateChecks, Mismatches: len(rep.Mismatches)}); err != nil {
		return rep, fmt.Errorf("verify: %w", err)
	}
	return rep, nil
}
