package gcos_test

import (
	"slices"
	"testing"
	"time"

	"gcos"
)

func TestDetectCoverageGaps(t *testing.T) {
	t.Parallel()
	g := func(key, scope, class string, v gcos.Verdict, cov gcos.CoverageOutcome, members int64) gcos.CoverageGroup {
		return gcos.CoverageGroup{GroupKey: key, Scope: scope, ObjectClass: class, SourceRegistry: class + "s", Verdict: v,
			Coverage: cov, RiskClass: "write_high", Members: members}
	}
	rel, not := gcos.VerdictRelevant, gcos.VerdictNotRelevant
	for _, tc := range []struct {
		name   string
		groups []gcos.CoverageGroup
		want   []string // coalesce keys
	}{
		{"nothing relevant", []gcos.CoverageGroup{g("g1", "policy", "task", not, "", 5)}, nil},
		{"one orphan among owned groups of its class: an orphan, no gap",
			[]gcos.CoverageGroup{g("g1", "policy", "task", rel, gcos.CoverageOrphan, 5), g("g2", "policy", "task", rel, gcos.CoverageCovered, 3)},
			[]string{"gov:coverage:orphan:g1"}},
		{"every group of a class an orphan in a scope: orphans and the scope's gap",
			[]gcos.CoverageGroup{g("g1", "policy", "task", rel, gcos.CoverageOrphan, 5), g("g2", "policy", "task", rel, gcos.CoverageOrphan, 2),
				g("g3", "audit", "task", rel, gcos.CoverageCovered, 2)},
			[]string{"gov:coverage:orphan:g1", "gov:coverage:orphan:g2", "gov:coverage:owner.gap:policy:task"}},
		{"an exception is no owner: the class still has none",
			[]gcos.CoverageGroup{g("g1", "policy", "task", rel, gcos.CoverageOrphan, 5), g("g2", "policy", "task", rel, gcos.CoverageApprovedException, 2)},
			[]string{"gov:coverage:orphan:g1", "gov:coverage:owner.gap:policy:task"}},
		{"an empty group is nobody's gap", []gcos.CoverageGroup{g("g1", "policy", "task", rel, gcos.CoverageOrphan, 0)}, nil},
		{"an orphan that is no longer relevant is none", []gcos.CoverageGroup{g("g1", "policy", "task", gcos.VerdictRetired, gcos.CoverageOrphan, 4)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, d := range gcos.DetectCoverageGaps(tc.groups) {
				got = append(got, d.Key())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	ds := gcos.DetectCoverageGaps([]gcos.CoverageGroup{g("g1", "policy", "task", rel, gcos.CoverageOrphan, 5), g("g2", "policy", "task", rel, gcos.CoverageOrphan, 2)})
	gap := ds[len(ds)-1]
	if gap.Evidence["groups"] != int64(2) || gap.Evidence["objects"] != int64(7) || gap.Evidence["scope"] != "policy" {
		t.Fatalf("owner gap evidence %v: want 2 groups, 7 objects, scope policy", gap.Evidence)
	}
	if ds[0].Evidence["objects"] != int64(5) || ds[0].Evidence["risk_class"] != "write_high" || ds[0].Evidence["scope"] != "policy" {
		t.Fatalf("orphan evidence %v: want its object count, risk class and scope", ds[0].Evidence)
	}
}

func TestDetectRegistryGaps(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	base := func() gcos.Registries {
		r := gcos.Registries{
			Collections: map[string]gcos.CollectionRow{"tasks": {CollectionName: "tasks"}},
			Classes:     map[string]*string{"task": gcos.Str("tasks")},
			Scopes:      []gcos.ScopeRow{{ScopeCode: "policy"}},
			Ownership:   []gcos.OwnershipRow{{ID: 1, ScopeCode: "policy", EntityType: gcos.Str("task"), OwnerRef: "team-a", Status: "active"}},
			Exceptions: []gcos.ExceptionRow{{ExceptionID: "E1", ScopeCode: gcos.Str("policy"), CollectionName: gcos.Str("tasks"),
				EntityCode: gcos.Str("T-1"), ApprovalRef: gcos.Str("APR-1"), ExpiresAt: &later, Status: "approved"}},
		}
		r.Finish()
		return r
	}
	bornAll := func(gcos.ExceptionObject) bool { return true }
	for _, tc := range []struct {
		name string
		edit func(*gcos.Registries)
		born func(gcos.ExceptionObject) bool
		want []string
	}{
		{"every row names what a registry holds", nil, bornAll, nil},
		{"an owner of a class no catalogue holds", func(r *gcos.Registries) { r.Ownership[0].EntityType = gcos.Str("ghost") }, bornAll,
			[]string{"gov:coverage:island.detected:governance_object_ownership:1"}},
		{"an owner in a scope no registry holds", func(r *gcos.Registries) { r.Ownership[0].ScopeCode = "shadow" }, bornAll,
			[]string{"gov:coverage:island.detected:governance_object_ownership:1"}},
		{"a retired ownership row is nobody's island", func(r *gcos.Registries) {
			r.Ownership[0].EntityType, r.Ownership[0].Status = gcos.Str("ghost"), "retired"
		}, bornAll, nil},
		{"an exception on a collection no registry holds", func(r *gcos.Registries) { r.Exceptions[0].CollectionName = gcos.Str("shadow_store") }, bornAll,
			[]string{"gov:coverage:island.detected:governance_exception:E1"}},
		{"an exception naming an object with no birth", nil, func(gcos.ExceptionObject) bool { return false },
			[]string{"gov:phantom:gap:exception:E1"}},
		{"an expired exception names nothing any more", func(r *gcos.Registries) { r.Exceptions[0].ExpiresAt = &now },
			func(gcos.ExceptionObject) bool { return false }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := base()
			if tc.edit != nil {
				tc.edit(&r)
			}
			var got []string
			for _, d := range gcos.DetectRegistryGaps(r, now, tc.born) {
				got = append(got, d.Key())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	if probes := gcos.PhantomProbes(base(), now); !slices.Equal(probes, []gcos.ExceptionObject{{Collection: "tasks", Code: "T-1"}}) {
		t.Fatalf("probes %v", probes)
	}
}
