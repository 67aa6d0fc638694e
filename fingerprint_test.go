package gcos_test

import (
	"encoding/json"
	"math/big"
	"math/rand/v2"
	"strings"
	"testing"
	"testing/quick"

	"gcos"
)

// rowHashes are per-row (seed 0, seed 1) hashes as PostgreSQL's hashtextextended returns them.
type rowHashes [][2]int64

func sumRows(rows rowHashes) gcos.Fingerprint {
	var f gcos.Fingerprint
	for _, r := range rows {
		f = f.Add(gcos.FingerprintFromRowHashes(r[0], r[1]))
	}
	return f
}

func TestFingerprintOrderAndBatchIndependent(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		n := rng.IntN(200)
		rows := make(rowHashes, n)
		for i := range rows {
			rows[i] = [2]int64{int64(rng.Uint64()), int64(rng.Uint64())}
		}
		if n > 1 && trial%3 == 0 {
			rows[1] = rows[0] // duplicates must count, not cancel
		}
		want := sumRows(rows)

		perm := make(rowHashes, n)
		for i, j := range rng.Perm(n) {
			perm[i] = rows[j]
		}
		if got := sumRows(perm); got != want {
			t.Fatalf("trial %d: permutation changed the fingerprint: %v vs %v", trial, got, want)
		}

		// Split the permuted rows into random batches, fingerprint each, combine in a random order.
		var batches []gcos.Fingerprint
		for i := 0; i < n; {
			size := 1 + rng.IntN(20)
			batches = append(batches, sumRows(perm[i:min(i+size, n)]))
			i += size
		}
		rng.Shuffle(len(batches), func(i, j int) { batches[i], batches[j] = batches[j], batches[i] })
		var combined gcos.Fingerprint
		for _, b := range batches {
			combined = combined.Add(b)
		}
		if combined != want {
			t.Fatalf("trial %d: batches combine to %v, want %v", trial, combined, want)
		}
	}
}

func TestFingerprintDuplicatesDoNotCancel(t *testing.T) {
	t.Parallel()
	one := gcos.FingerprintFromRowHashes(12345, -678)
	if two := one.Add(one); two.IsZero() || two == one {
		t.Fatalf("two identical rows fingerprint as %v (one row: %v)", two, one)
	}
}

func TestFingerprintAddSubRoundTrip(t *testing.T) {
	t.Parallel()
	f := func(a0, a1, b0, b1 int64) bool {
		a, b := gcos.FingerprintFromRowHashes(a0, a1), gcos.FingerprintFromRowHashes(b0, b1)
		return a.Add(b).Sub(b) == a && a.Add(b) == b.Add(a) && a.Sub(a).IsZero()
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
}

func TestFingerprintStringRoundTrip(t *testing.T) {
	t.Parallel()
	f := func(lo, hi uint64) bool {
		fp := gcos.Fingerprint{Lo: lo, Hi: hi}
		s := fp.String()
		back, err := gcos.ParseFingerprint(s)
		return err == nil && back == fp && len(s) == 32 && s == strings.ToLower(s)
	}
	if err := quick.Check(f, nil); err != nil {
		t.Fatal(err)
	}
	if got := (gcos.Fingerprint{Lo: 1, Hi: 2}).String(); got != "00000000000000020000000000000001" {
		t.Fatalf("String = %q: want hi then lo, zero-padded", got)
	}
	b, err := json.Marshal(map[string]gcos.Fingerprint{"content_hash": {Lo: 1, Hi: 2}})
	if err != nil || string(b) != `{"content_hash":"00000000000000020000000000000001"}` {
		t.Fatalf("JSON = %s, %v", b, err)
	}
	var back map[string]gcos.Fingerprint
	if err := json.Unmarshal(b, &back); err != nil || back["content_hash"] != (gcos.Fingerprint{Lo: 1, Hi: 2}) {
		t.Fatalf("JSON round trip = %v, %v", back, err)
	}
}

func TestParseFingerprintRejects(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "abc", strings.Repeat("0", 31), strings.Repeat("0", 33), strings.Repeat("g", 32),
		"-000000000000000000000000000000f", "+000000000000000000000000000000f"} {
		if _, err := gcos.ParseFingerprint(s); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("ParseFingerprint(%q) error = %v, want EINVALID", s, err)
		}
	}
}

func TestFingerprintFromSums(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 100 {
		n := rng.IntN(500)
		var rows rowHashes
		lo, hi := new(big.Int), new(big.Int)
		for range n {
			r := [2]int64{int64(rng.Uint64()), int64(rng.Uint64())}
			if trial%2 == 0 && r[0] > 0 {
				r[0] = -r[0] // many negatives: the SQL sum goes below -2^63
			}
			rows = append(rows, r)
			lo.Add(lo, big.NewInt(r[0]))
			hi.Add(hi, big.NewInt(r[1]))
		}
		got, err := gcos.FingerprintFromSums(lo.String(), hi.String())
		if err != nil {
			t.Fatal(err)
		}
		if want := sumRows(rows); got != want {
			t.Fatalf("trial %d: sums %s,%s reduce to %v, want %v", trial, lo, hi, got, want)
		}
	}

	tests := []struct {
		lo, hi string
		want   gcos.Fingerprint
	}{
		{"0", "0", gcos.Fingerprint{}},
		{"-1", "1", gcos.Fingerprint{Lo: ^uint64(0), Hi: 1}},
		{"18446744073709551616", "18446744073709551617", gcos.Fingerprint{Lo: 0, Hi: 1}}, // 2^64, 2^64+1
		{"-18446744073709551617", "36893488147419103232", gcos.Fingerprint{Lo: ^uint64(0), Hi: 0}},
	}
	for _, tt := range tests {
		got, err := gcos.FingerprintFromSums(tt.lo, tt.hi)
		if err != nil || got != tt.want {
			t.Errorf("FingerprintFromSums(%s, %s) = %v, %v; want %v", tt.lo, tt.hi, got, err, tt.want)
		}
	}
	for _, bad := range [][2]string{{"", "0"}, {"0", "1.5"}, {"x", "0"}, {"0", "0x10"}} {
		if _, err := gcos.FingerprintFromSums(bad[0], bad[1]); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("FingerprintFromSums(%q, %q) error = %v, want EINVALID", bad[0], bad[1], err)
		}
	}
}
