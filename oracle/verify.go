package oracle

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// Mismatch is one place where the incremental state differs from the reference.
type Mismatch struct {
	Kind        string `json:"kind"` // group, object, ledger or gate
	Key         string `json:"key"`  // group key, candidate key, scope or object reference
	Scope       string `json:"scope,omitempty"`
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
	At             time.Time  `json:"at"`
	RulesetVersion string     `json:"ruleset_version"`
	Births         int64      `json:"births"`
	Groups         int        `json:"groups"`        // reference groups (with members)
	Objects        int        `json:"objects"`       // reference object rows
	GateChecks     int        `json:"gate_checks"`   // gate decisions compared (objects × actions)
	EvaluateTime   float64    `json:"evaluate_secs"` // reading the substrate and evaluating it from scratch
	Mismatches     []Mismatch `json:"mismatches"`
}

// Clean reports whether the incremental state equals the reference everywhere it was compared.
func (r Report) Clean() bool { return len(r.Mismatches) == 0 }

// VerifyOptions say how much of the gate to compare.
type VerifyOptions struct {
	Sample int      // objects sampled for the gate beyond those with object rows (both actions each)
	Seed   uint64   // picks the sample
	Also   []string // objects (collection:code) the gate is asked about in any case, e.g. those just changed
}

// Reference reads the substrate in one REPEATABLE READ transaction and evaluates it under the active ruleset.
func ReferenceOf(ctx context.Context, store *postgres.Store) (*Reference, error) {
	ref, _, err := evaluateIn(ctx, store, nil)
	return ref, err
}

// Verify compares the store's incremental state with the reference at one instant: every group with members,
// every object row and every scope's ledger are read in the transaction that reads the substrate; the gate is then
// asked (without follow-ups) about every object with a row and a sample of the others, for write and read.
func Verify(ctx context.Context, store *postgres.Store, opts VerifyOptions) (Report, error) {
	var inc incremental
	start := time.Now()
	ref, _, err := evaluateIn(ctx, store, func(tx pgx.Tx) error {
		var err error
		inc, err = readIncremental(ctx, tx)
		return err
	})
	if err != nil {
		return Report{}, err
	}
	rep := Report{At: ref.At, RulesetVersion: ref.RulesetVersion, Births: ref.Births, Groups: len(ref.Groups),
		Objects: len(ref.Objects), EvaluateTime: time.Since(start).Seconds(), Mismatches: []Mismatch{}}
	rep.Mismatches = append(rep.Mismatches, compareGroups(ref, inc)...)
	rep.Mismatches = append(rep.Mismatches, compareObjects(ref, inc)...)
	rep.Mismatches = append(rep.Mismatches, compareLedgers(ref, inc)...)

	objects := slices.Clone(ref.ObjectsWithRows())
	objects = append(objects, inc.objectRefs...)
	objects = append(objects, opts.Also...)
	all := ref.ObjectRefs()
	rng := rand.New(rand.NewPCG(opts.Seed, opts.Seed^0x9e3779b97f4a7c15))
	for _, i := range rng.Perm(len(all))[:min(opts.Sample, len(all))] {
		objects = append(objects, all[i])
	}
	sort.Strings(objects)
	objects = slices.Compact(objects)
	for _, obj := range objects {
		for _, action := range []string{gcos.ActionWrite, gcos.ActionRead} {
			want := ref.Gate(obj, action)
			got := store.Decide(ctx, obj, action)
			rep.GateChecks++
			if got.Decision != want.Decision {
				rep.Mismatches = append(rep.Mismatches, Mismatch{Kind: "gate", Key: obj, Field: action,
					Incremental: fmt.Sprintf("%s (%s: %s)", got.Decision, got.EffectiveVerdict, first(got.Reasons)),
					Reference:   fmt.Sprintf("%s (%s: %s)", want.Decision, want.EffectiveVerdict, first(want.Reasons))})
			}
		}
		if err := ctx.Err(); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}

// evaluateIn reads the substrate (and, through also, anything else at the same instant) in one read-only
// REPEATABLE READ transaction, then evaluates it under the active ruleset's components.
func evaluateIn(ctx context.Context, store *postgres.Store, also func(pgx.Tx) error) (*Reference, Substrate, error) {
	tx, err := store.Pool().BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, Substrate{}, fmt.Errorf("verify: begin: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	cfg := store.Config()
	sub, err := Read(ctx, tx, cfg.SourceBinding, store.ObjectFingerprintSQL())
	if err != nil {
		return nil, sub, fmt.Errorf("verify: read the substrate: %w", err)
	}
	if also != nil {
		if err := also(tx); err != nil {
			return nil, sub, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, sub, fmt.Errorf("verify: %w", err)
	}
	if sub.RulesetVersion == "" {
		return nil, sub, gcos.Errorf(gcos.EUNAVAILABLE, "verify: no ruleset is active, so there is nothing to judge against")
	}
	rs, err := store.GetRuleset(ctx, sub.RulesetVersion)
	if err != nil {
		return nil, sub, fmt.Errorf("verify: ruleset %s: %w", sub.RulesetVersion, err)
	}
	ref := Evaluate(sub, rs.Version, rs.Components, Options{ObjectRiskClasses: cfg.Gate.ObjectRiskClasses,
		LowRiskClasses: cfg.Gate.LowRiskClasses, TTL: cfg.TTL})
	return ref, sub, nil
}

// incremental is GCOS's state as its views present it, read at the reference's instant.
type incremental struct {
	groups     map[string]incGroup
	objects    map[string]incObject
	objectRefs []string
	ledgers    map[string]gcos.Ledger
}

type incGroup struct {
	scope, verdict, effective, quality, risk, coverage string
	required                                           *bool
	members                                            int64
}

type incObject struct {
	ref, reason, groupKey, scope, effective, quality, risk, coverage string
	required                                                         bool
}

func readIncremental(ctx context.Context, tx pgx.Tx) (incremental, error) {
	inc := incremental{groups: map[string]incGroup{}, objects: map[string]incObject{}, ledgers: map[string]gcos.Ledger{}}
	// A group is live in the incremental state when it counts members: its candidate row's, or (never seeded) its
	// registry row's.
	if err := each(ctx, tx, `SELECT group_key, coalesce(scope, ''), coalesce(candidate_verdict, ''), effective_verdict,
			coalesce(input_quality_state, ''), coalesce(risk_class, ''), coverage_required, coalesce(coverage_outcome, ''),
			coalesce(member_count, group_member_count)
		FROM v_candidate_effective WHERE coalesce(member_count, group_member_count) > 0`, func(r pgx.Rows) error {
		var key string
		var g incGroup
		if err := r.Scan(&key, &g.scope, &g.verdict, &g.effective, &g.quality, &g.risk, &g.required, &g.coverage, &g.members); err != nil {
			return err
		}
		inc.groups[key] = g
		return nil
	}); err != nil {
		return inc, fmt.Errorf("verify: read candidate rows: %w", err)
	}
	if err := each(ctx, tx, `SELECT candidate_key, object_ref, materialization_reason, group_key, coalesce(scope, ''),
			effective_verdict, coalesce(input_quality_state, ''), coalesce(risk_class, ''), coverage_required,
			coalesce(coverage_outcome, '')
		FROM v_candidate_object_effective WHERE lifecycle_status = 'active'`, func(r pgx.Rows) error {
		var key string
		var o incObject
		if err := r.Scan(&key, &o.ref, &o.reason, &o.groupKey, &o.scope, &o.effective, &o.quality, &o.risk, &o.required, &o.coverage); err != nil {
			return err
		}
		inc.objects[key] = o
		inc.objectRefs = append(inc.objectRefs, o.ref)
		return nil
	}); err != nil {
		return inc, fmt.Errorf("verify: read object rows: %w", err)
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
				scope := got.scope
				if inRef {
					scope = deref(want.Scope)
				}
				out = append(out, Mismatch{Kind: "group", Key: k, Scope: scope, Field: field, Incremental: g, Reference: w})
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
				scope := got.scope
				if inRef {
					scope = want.Scope
				}
				out = append(out, Mismatch{Kind: "object", Key: k, Scope: scope, Field: field, Incremental: g, Reference: w})
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

// verifySubject is the one subject of the verify_mismatch finding: the whole estate.
const verifySubject = "incremental_state"

// AuditVerify is the full audit's verification: Verify, then a verify_mismatch finding naming how many places
// differ and the first of them when anything does, or the open one closed when nothing does.
func AuditVerify(ctx context.Context, store *postgres.Store, runID string, opts VerifyOptions) (Report, error) {
	rep, err := Verify(ctx, store, opts)
	if err != nil {
		return rep, err
	}
	if rep.Clean() {
		if _, err := store.ResolveFinding(ctx, gcos.IssueVerifyMismatch, verifySubject, ""); err != nil {
			return rep, fmt.Errorf("verify: close verify_mismatch: %w", err)
		}
		return rep, nil
	}
	kinds := map[string]int{}
	var first []string
	for i, m := range rep.Mismatches {
		kinds[m.Kind+"."+m.Field]++
		if i < 20 {
			first = append(first, m.String())
		}
	}
	f := gcos.NewFinding(gcos.IssueVerifyMismatch, verifySubject, runID, rep.RulesetVersion, map[string]any{
		"mismatches": len(rep.Mismatches), "by_field": kinds, "first": first, "verified_at": rep.At,
		"reproduce": "gcos verify",
	})
	if _, err := store.RaiseFinding(ctx, f); err != nil {
		return rep, fmt.Errorf("verify: raise verify_mismatch: %w", err)
	}
	return rep, nil
}
