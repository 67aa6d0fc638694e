package gcos_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"gcos"
)

// FuzzCanonicalTupleInjective checks that two different dimension tuples never share a canonical encoding.
func FuzzCanonicalTupleInjective(f *testing.F) {
	f.Add("a:b", "c", uint8(0), "a", "b:c", uint8(0))
	f.Add("", "N", uint8(1), "N", "", uint8(2))
	f.Add("S1:x", "", uint8(3), "S1:xS0:", "", uint8(1))
	f.Fuzz(func(t *testing.T, a1, a2 string, nullsA uint8, b1, b2 string, nullsB uint8) {
		build := func(x, y string, nulls uint8) gcos.Dimensions {
			p := func(s string, bit uint8) *string {
				if nulls&bit != 0 {
					return nil
				}
				return gcos.Str(s)
			}
			return gcos.Dimensions{ObjectClass: p(x, 1), SourceRegistry: p(y, 2), Scope: p(x+y, 4)}
		}
		da, db := build(a1, a2, nullsA), build(b1, b2, nullsB)
		if string(gcos.CanonicalTuple(da)) == string(gcos.CanonicalTuple(db)) && !cmp.Equal(da, db) {
			t.Fatalf("%+v and %+v share the canonical tuple %q", da, db, gcos.CanonicalTuple(da))
		}
	})
}

// FuzzParseVerdictPolicy checks that any document either fails cleanly or yields a policy that always decides.
func FuzzParseVerdictPolicy(f *testing.F) {
	f.Add(gcos.DefaultVerdictPolicyJSON())
	f.Add([]byte(`{"version":1,"rules":[{"name":"f","verdict":"unknown"}]}`))
	f.Add([]byte(`{"version":1,"rules":[{"name":"a","verdict":"relevant","any":[[{"fact":"privacy","op":"in","values":["x"]}]]},{"name":"f","verdict":"unknown"}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		p, err := gcos.ParseVerdictPolicy(doc)
		if err != nil {
			if gcos.ErrorCode(err) != gcos.EINVALID {
				t.Fatalf("error code %s for %v", gcos.ErrorCode(err), err)
			}
			return
		}
		ev := p.Evaluate(gcos.GroupFacts{Privacy: gcos.Str("x")})
		if !ev.Verdict.Stored() || ev.Rule == "" {
			t.Fatalf("a valid policy must always decide, got %+v", ev)
		}
	})
}

// FuzzFingerprintFromSums checks that any accepted sum reduces without panicking and round-trips through String.
func FuzzFingerprintFromSums(f *testing.F) {
	f.Add("0", "-1")
	f.Add("-99999999999999999999999999", "18446744073709551616")
	f.Fuzz(func(t *testing.T, lo, hi string) {
		fp, err := gcos.FingerprintFromSums(lo, hi)
		if err != nil {
			return
		}
		back, err := gcos.ParseFingerprint(fp.String())
		if err != nil || back != fp {
			t.Fatalf("round trip of %v: %v, %v", fp, back, err)
		}
	})
}
