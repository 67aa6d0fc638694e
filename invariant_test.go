package gcos_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"gcos"
)

func TestResolveCoverage(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		owner     *string
		exception bool
		want      gcos.CoverageOutcome
	}{
		{"owner", gcos.Str("GOV-SIV"), false, gcos.CoverageCovered},
		{"no owner", nil, false, gcos.CoverageOrphan},
		{"empty owner is no owner", gcos.Str(""), false, gcos.CoverageOrphan},
		{"exception without owner", nil, true, gcos.CoverageApprovedException},
		{"exception wins over owner", gcos.Str("GOV-SIV"), true, gcos.CoverageApprovedException},
	}
	for _, tt := range tests {
		if got := gcos.ResolveCoverage(tt.owner, tt.exception); got != tt.want {
			t.Errorf("%s: ResolveCoverage = %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestBucketFor(t *testing.T) {
	t.Parallel()
	tests := []struct {
		verdict  gcos.Verdict
		coverage gcos.CoverageOutcome
		want     gcos.Bucket
	}{
		{"relevant", "covered", "covered"},
		{"relevant", "orphan", "orphans"},
		{"relevant", "approved_exception", "approved_exceptions"},
		{"relevant", "", "orphans"}, // not proven covered
		{"not_relevant", "", "retired_or_ignored"},
		{"retired", "covered", "retired_or_ignored"}, // coverage only splits relevant
		{"stale", "covered", "stale"},
		{"unknown", "", "stale"},
		{"needs_input", "", "stale"},
		{"deferred_birth", "", "deferred_birth"},
		{"class_0", "", "class_0"},
		{"something_new", "", "stale"},
	}
	for _, tt := range tests {
		if got := gcos.BucketFor(tt.verdict, tt.coverage); got != tt.want {
			t.Errorf("BucketFor(%q, %q) = %q, want %q", tt.verdict, tt.coverage, got, tt.want)
		}
	}
}

func TestLedger(t *testing.T) {
	t.Parallel()
	objects := []struct {
		verdict  gcos.Verdict
		coverage gcos.CoverageOutcome
		count    int64
	}{
		{"relevant", "covered", 10}, {"relevant", "orphan", 2}, {"relevant", "approved_exception", 1},
		{"not_relevant", "", 5}, {"retired", "", 4}, {"stale", "", 3}, {"unknown", "", 2}, {"needs_input", "", 1},
		{"deferred_birth", "", 6}, {"class_0", "", 7},
		// A second group in each bucket adds to it (a ledger sums many groups).
		{"relevant", "covered", 1}, {"relevant", "orphan", 1}, {"relevant", "approved_exception", 1},
		{"retired", "", 1}, {"stale", "", 1}, {"deferred_birth", "", 1}, {"class_0", "", 1},
	}
	l := gcos.Ledger{Scope: "policy", Total: 48}
	for _, o := range objects {
		l.Add(gcos.BucketFor(o.verdict, o.coverage), o.count)
	}
	want := gcos.Ledger{Scope: "policy", Total: 48, Covered: 11, Orphans: 3, ApprovedExceptions: 2, RetiredOrIgnored: 10,
		Stale: 7, DeferredBirth: 7, Class0: 8}
	if diff := cmp.Diff(want, l); diff != "" {
		t.Fatalf("ledger (-want +got):\n%s", diff)
	}
	if l.Sum() != 48 || !l.Closes() || l.Difference() != 0 {
		t.Fatalf("Sum %d, Closes %v, Difference %d", l.Sum(), l.Closes(), l.Difference())
	}
	l.Total = 50
	if l.Closes() || l.Difference() != 2 {
		t.Fatalf("uncounted objects: Closes %v, Difference %d", l.Closes(), l.Difference())
	}
	l.Total = 47
	if l.Closes() || l.Difference() != -1 {
		t.Fatalf("double-counted object: Closes %v, Difference %d", l.Closes(), l.Difference())
	}
}
