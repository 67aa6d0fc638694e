package gate_test

import (
	"strings"
	"testing"

	"gcos"
	"gcos/postgres"
)

// FuzzParseObjectRef: any input either parses into a non-empty collection and code that rebuild it exactly, or is
// refused with EINVALID; it never panics.
func FuzzParseObjectRef(f *testing.F) {
	for _, s := range []string{"commerce_orders:order-1", "a:b:c", ":", "x:", ":y", "", "a\x00:b", strings.Repeat("a", 600) + ":b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ref, err := postgres.ParseObjectRef(s)
		if err != nil {
			if gcos.ErrorCode(err) != gcos.EINVALID {
				t.Fatalf("%q: error code %s, want invalid", s, gcos.ErrorCode(err))
			}
			return
		}
		if ref.Collection == "" || ref.Code == "" || ref.String() != s {
			t.Fatalf("%q parsed into %+v", s, ref)
		}
	})
}

// TestGateBadInputChangesNothing: malformed objects and actions are blocked with a reason and write nothing.
func TestGateBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 2000, nil)
	g := b.gate() // made first: it hands off what the world holds (gcostest.World.HandOff)
	before := b.world().Digest(t, `SELECT * FROM governance_candidate_state`) + b.world().Digest(t, `SELECT id, status, occurrence_count FROM system_issues`)
	for _, in := range []struct{ object, action string }{
		{"", "write"}, {"no-colon", "write"}, {"a:b", "delete"}, {"x\n:y", "read"}, {strings.Repeat("z", 700) + ":1", "write"},
		{"nowhere:nothing", "write"},
	} {
		r := g.Gate(b.ctx, in.object, in.action)
		if r.Decision != gcos.GateBlock || len(r.Reasons) == 0 {
			t.Fatalf("gate(%q, %q) = %s %v, want block with a reason", in.object, in.action, r.Decision, r.Reasons)
		}
	}
	after := b.world().Digest(t, `SELECT * FROM governance_candidate_state`) + b.world().Digest(t, `SELECT id, status, occurrence_count FROM system_issues`)
	if after != before {
		t.Fatal("bad gate input changed state")
	}
}
