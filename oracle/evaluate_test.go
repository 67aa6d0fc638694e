package oracle_test

import (
	"sort"
	"testing"
	"time"

	"gcos"
	"gcos/oracle"
)

// A tiny substrate judged by hand: two scopes, one owner in one of them, an inherited child, a retired object, an
// object exception in one scope and an unregistered collection.
func TestEvaluateByHand(t *testing.T) {
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	str := gcos.Str
	tr := true
	sub := oracle.Substrate{
		At:             now,
		RulesetVersion: "gov-rs-000000000001",
		Births: []oracle.Birth{
			{ID: 1, Code: "o-1", Collection: "orders", Class: "order", Status: "active"},
			{ID: 2, Code: "o-2", Collection: "orders", Class: "order", Status: "active"},
			{ID: 3, Code: "o-2-line", Collection: "orders", Class: "order_line", Status: "draft", Parent: str("o-2")},
			{ID: 4, Code: "o-3", Collection: "orders", Class: "order", Status: "retired"},
			{ID: 5, Code: "x-1", Collection: "nowhere", Class: "order", Status: "active"},
			{ID: 6, Code: "o-4-line", Collection: "orders", Class: "order_line", Status: "active", Parent: str("o-missing")},
		},
		Collections:      map[string]gcos.CollectionRow{"orders": {CollectionName: "orders", CoverageStatus: str("BIRTH_REQUIRED"), ScopeClass: str("IN_SCOPE")}},
		Classes:          map[string]bool{"order": true, "order_line": true},
		OwnershipPresent: true,
		Ownership:        []gcos.OwnershipRow{{ID: 1, ScopeCode: "health", EntityType: str("order"), OwnerRef: "team-a", Status: "active"}},
		Exceptions: []gcos.ExceptionRow{{ExceptionID: "E1", ScopeCode: str("policy"), EntityType: str("order"), CollectionName: str("orders"),
			EntityCode: str("o-1"), ApprovalRef: str("APR"), ExpiresAt: &later, Fingerprint: str("fp-o-1"), Status: "approved"}},
		Fingerprints:  map[[2]string]string{{"orders", "o-1"}: "fp-o-1"},
		InputFindings: map[string]gcos.InputQuality{},
	}
	rs := gcos.RulesetComponents{
		CoverageProfile: []gcos.CoverageProfileRow{{EntityType: "order", RiskClass: str("write_high"), CoverageRequired: &tr, Privacy: str("shared")}},
		Scopes:          []gcos.ScopeRow{{ScopeCode: "health"}, {ScopeCode: "policy"}},
		Policy:          gcos.DefaultVerdictPolicy(),
		Absent:          []string{gcos.ComponentAxis},
	}
	sub.Bases, sub.Births = fold(sub.Births)
	ref := oracle.Evaluate(sub, sub.RulesetVersion, rs, oracle.Options{TTL: gcos.DefaultConfig().TTL, LowRiskClasses: []string{"read_descriptive"}})

	// Groups: (order, orders, active) holds o-1, o-2 and the child o-2-line; the orphan child o-4-line keeps its own
	// values (an order_line with no profile: unknown risk).
	type want struct {
		class, coll, status, scope string
		members                    int64
		verdict                    gcos.Verdict
		coverage                   gcos.CoverageOutcome
	}
	wants := []want{
		{"order", "orders", "active", "health", 3, gcos.VerdictRelevant, gcos.CoverageCovered},
		{"order", "orders", "active", "policy", 3, gcos.VerdictRelevant, gcos.CoverageOrphan},
		{"order", "orders", "retired", "health", 1, gcos.VerdictRetired, ""},
		{"order", "nowhere", "active", "policy", 1, gcos.VerdictNeedsInput, ""},
		{"order_line", "orders", "active", "health", 1, gcos.VerdictUnknown, ""}, // no coverage profile: undecidable
	}
	if len(ref.Groups) != 8 {
		t.Errorf("%d groups, want 8 (4 bases × 2 scopes)", len(ref.Groups))
	}
	for _, w := range wants {
		d := gcos.Dimensions{ObjectClass: str(w.class), SourceRegistry: str(w.coll), Scope: str(w.scope), LifecycleStatus: str(w.status)}
		if w.scope == "health" && w.class == "order" {
			d.OwnerScope = str("team-a")
		}
		g, ok := ref.Groups[gcos.GroupKey(d)]
		if !ok {
			t.Errorf("no group %+v", w)
			continue
		}
		if g.Members != w.members || g.Verdict != w.verdict || g.Coverage != w.coverage {
			t.Errorf("group %+v: members %d verdict %s coverage %q", w, g.Members, g.Verdict, g.Coverage)
		}
	}

	// The exception on o-1 gives it an object row in its own scope (policy), where it is excepted; not in health.
	o, ok := ref.Objects["orders:o-1"]
	if !ok || o.Scope != "policy" || o.Coverage != gcos.CoverageApprovedException || o.Reason != "exception" {
		t.Fatalf("object row of o-1: %+v", o)
	}
	policy, health := ref.Ledgers["policy"], ref.Ledgers["health"]
	if policy.Total != 6 || !policy.Closes() || policy.ApprovedExceptions != 1 || policy.Orphans != 2 || policy.Stale != 2 || policy.RetiredOrIgnored != 1 {
		t.Errorf("policy ledger %+v", policy)
	}
	if !health.Closes() || health.Covered != 3 || health.Orphans != 0 || health.Stale != 2 {
		t.Errorf("health ledger %+v", health)
	}

	// The gate: o-1 is excepted in policy and owned in health; o-2 is an orphan in policy; the child with a missing
	// parent is blocked by name; an unknown object is blocked.
	for _, c := range []struct {
		object, action, decision string
	}{
		{"orders:o-1", gcos.ActionWrite, gcos.GateAllow},
		{"orders:o-2", gcos.ActionWrite, gcos.GateBlock},
		{"orders:o-2-line", gcos.ActionWrite, gcos.GateBlock},
		{"orders:o-3", gcos.ActionWrite, gcos.GateAllow},
		{"orders:o-4-line", gcos.ActionRead, gcos.GateBlock},
		{"nowhere:x-1", gcos.ActionRead, gcos.GateBlock},
		{"orders:unborn", gcos.ActionRead, gcos.GateBlock},
	} {
		if d := ref.Gate(c.object, c.action); d.Decision != c.decision {
			t.Errorf("gate %s %s: %s (%v), want %s", c.action, c.object, d.Decision, d.Reasons, c.decision)
		}
	}
	// Once the exception expires, o-1 is an orphan in policy like its group.
	sub.At = later
	ref = oracle.Evaluate(sub, sub.RulesetVersion, rs, oracle.Options{TTL: gcos.DefaultConfig().TTL})
	if _, ok := ref.Objects["orders:o-1"]; ok {
		t.Error("an expired exception still materializes its object row")
	}
	if d := ref.Gate("orders:o-1", gcos.ActionWrite); d.Allowed() {
		t.Errorf("gate after expiry: %s", d.Decision)
	}
}

// fold is the obvious reading of a handful of births, in Go: each one's anchor found by walking up its parent chain
// within its collection (at most 1,000 steps; a birth that is its own parent ends the walk), and the members of every
// base counted. The database does this for the reference (oracle.Read); TestReadWalksParentChainsAsFoldDoes holds
// the two to the same answer.
func fold(births []oracle.Birth) ([]oracle.Base, []oracle.Birth) {
	byCode := map[[2]string]int{}
	for i, b := range births {
		byCode[[2]string{b.Collection, b.Code}] = i
	}
	members := map[[3]string]int64{}
	out := make([]oracle.Birth, len(births))
	for i, b := range births {
		anchor, found := i, true
		for hops := 0; births[anchor].Parent != nil && hops < 1000; hops++ {
			j, ok := byCode[[2]string{births[anchor].Collection, *births[anchor].Parent}]
			if !ok {
				found = anchor != i
				break
			}
			if j == anchor {
				break
			}
			anchor = j
		}
		b.AnchorClass, b.AnchorStatus, b.ParentFound = births[anchor].Class, births[anchor].Status, found
		members[[3]string{b.AnchorClass, b.Collection, b.AnchorStatus}]++
		out[i] = b
	}
	var bases []oracle.Base
	for k, n := range members {
		bases = append(bases, oracle.Base{Class: k[0], Collection: k[1], Lifecycle: k[2], Members: n})
	}
	sort.Slice(bases, func(i, j int) bool {
		a, b := bases[i], bases[j]
		return a.Class+"\x00"+a.Collection+"\x00"+a.Lifecycle < b.Class+"\x00"+b.Collection+"\x00"+b.Lifecycle
	})
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return bases, out
}
