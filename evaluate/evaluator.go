package evaluate

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"gcos"
	"gcos/postgres"
)

// Evaluator computes group verdicts under one ruleset: the rule side (coverage profile, axis, scopes, verdict
// policy) comes from the ruleset's stored components, so a verdict is reproducible from its ruleset version; the
// source side (collections, classes, ownership, exceptions) comes from the live registries.
type Evaluator struct {
	core    *postgres.Store // the birth binding's SQL the object-row derivation reads through
	ruleset postgres.RulesetRow
	regs    gcos.Registries
	policy  gcos.VerdictPolicy
	ttl     gcos.TTLConfig
	now     time.Time // database clock, for exception expiry
	// objectRisk are the risk classes whose write-path objects get rows of their own (gate.object_risk_classes).
	objectRisk []string
}

// Registries are the registries the evaluator derives groups from.
func (e *Evaluator) Registries() gcos.Registries { return e.regs }

// New loads the registries and exceptions an evaluation under rs needs, reading through q (the caller's
// transaction: a scan's, the backfill's).
func New(ctx context.Context, core *postgres.Store, q postgres.Querier, rs postgres.RulesetRow) (*Evaluator, error) {
	regs, err := core.RegistriesUnder(ctx, q, rs.Components)
	if err != nil {
		return nil, err
	}
	var now time.Time
	if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return nil, fmt.Errorf("read database clock: %w", err)
	}
	cfg := core.Config()
	return &Evaluator{core: core, ruleset: rs, regs: regs, policy: rs.Components.Policy, ttl: cfg.TTL, now: now,
		objectRisk: cfg.Gate.ObjectRiskClasses}, nil
}

var settledWithoutCoverage = []gcos.Verdict{gcos.VerdictNotRelevant, gcos.VerdictClass0, gcos.VerdictDeferredBirth, gcos.VerdictRetired}

// evaluateHook lets tests make one group's re-evaluation fail; nil in production.
var evaluateHook func(gcos.Group) error

// Evaluate judges one group (or, with objectKey set, one materialized object of it).
func (e *Evaluator) Evaluate(g gcos.Group, objectKey string) (postgres.CandidateValues, error) {
	if evaluateHook != nil {
		if err := evaluateHook(g); err != nil {
			return postgres.CandidateValues{}, err
		}
	}
	facts := e.regs.Facts(g.Dimensions, g.MemberCount)
	// A value outside the policy's vocabulary (an odd lifecycle status, an unheard-of risk class) is input no
	// rule can be trusted with.
	if len(e.policy.CheckVocabulary(facts)) > 0 && postgres.Deref(facts.InputQuality) == string(gcos.InputAccepted) {
		facts.InputQuality = gcos.Str(string(gcos.InputInvalidSchema))
	}
	ev := e.policy.Evaluate(facts)
	class := ""
	if g.ObjectClass != nil {
		class = *g.ObjectClass
	}
	v := postgres.CandidateValues{
		GroupKey:     g.Key,
		Verdict:      ev.Verdict,
		Rule:         ev.Rule,
		InputQuality: *facts.InputQuality,
		RiskClass:    e.regs.RiskClass(class),
		// Coverage is required of a group the class requires it of, unless the verdict settled that the group
		// needs no owner (not relevant, private, deferred or retired); an undecided group keeps the requirement.
		CoverageRequired: e.regs.CoverageRequired(class) && !slices.Contains(settledWithoutCoverage, ev.Verdict),
		OwnerScope:       g.OwnerScope,
		MemberCount:      g.MemberCount,
	}
	v.TTL = e.ttl.TTLFor(v.RiskClass)
	deps, err := json.Marshal(gcos.NewDependsOn(g.Dimensions))
	if err != nil {
		return v, err
	}
	v.DependsOn = deps
	if scope := postgres.Deref(g.Scope); g.OwnerScope == nil && scope != gcos.UnscopedScope && objectKey == "" {
		if r := gcos.ResolveOwnership(e.regs.Ownership, scope, class, postgres.Deref(g.SourceRegistry)); r.Disputed {
			v.OwnerDispute = r.Claimants
		}
	}
	if v.Verdict == gcos.VerdictRelevant {
		exc := e.regs.GroupException(g.Dimensions, e.now)
		if exc != nil {
			v.ExceptionID, v.ExceptionExpiresAt = &exc.ExceptionID, exc.ExpiresAt
		}
		v.Coverage = gcos.ResolveCoverage(g.OwnerScope, exc != nil)
		v.CoverageOwner = g.OwnerScope
	}
	evidence, err := json.Marshal(map[string]any{
		"ruleset": e.ruleset.Version, "group": g.Dimensions, "facts": facts, "verdict": v.Verdict, "rule": v.Rule,
		"risk_class": v.RiskClass, "coverage_required": v.CoverageRequired, "coverage": v.Coverage,
		"exception": v.ExceptionID, "members": g.MemberCount, "object": objectKey,
	})
	if err != nil {
		return v, err
	}
	sum := sha256.Sum256(evidence)
	v.Evidence = hex.EncodeToString(sum[:16])
	return v, nil
}

// Retire judges a group whose source is gone: no member is left in it, or its key no longer follows from the
// registries (an owner or axis family moved its members to another key). Doc 40 §40.8: the row becomes verdict
// retired, lifecycle retired, zero members, and is kept for the ledger and history, never deleted.
func (e *Evaluator) Retire(g gcos.Group, why string) (postgres.CandidateValues, error) {
	class := postgres.Deref(g.ObjectClass)
	v := postgres.CandidateValues{GroupKey: g.Key, Verdict: gcos.VerdictRetired, Rule: "group_retired:" + why,
		InputQuality: string(gcos.InputAccepted), RiskClass: e.regs.RiskClass(class), OwnerScope: g.OwnerScope,
		Lifecycle: gcos.LifecycleRetired}
	v.TTL = e.ttl.TTLFor(v.RiskClass)
	deps, err := json.Marshal(gcos.NewDependsOn(g.Dimensions))
	if err != nil {
		return v, err
	}
	v.DependsOn = deps
	sum := sha256.Sum256([]byte("retired:" + why + ":" + g.Key + ":" + e.ruleset.Version))
	v.Evidence = hex.EncodeToString(sum[:16])
	return v, nil
}

// WithRegistries is the evaluator over other registries (a preview's proposed ones), at the same instant and under
// the same ruleset: what an evaluation would say if the registries held regs.
func (e *Evaluator) WithRegistries(regs gcos.Registries) *Evaluator {
	c := *e
	c.regs = regs
	return &c
}

// Now is the database clock the evaluator judges exception expiry at.
func (e *Evaluator) Now() time.Time { return e.now }
