package gcos

import (
	"fmt"
	"math/big"
	"strconv"
)

// Fingerprint is an order-independent multiset hash of a group's rows (SPEC §5), two independent 64-bit lanes.
//
// Each row's content (its id included) is hashed in SQL by hashtextextended(row_text, 0) for Lo and
// hashtextextended(row_text, 1) for Hi; a group's fingerprint is the sum of its rows' hashes, per lane, mod 2^64.
// Addition (not XOR) keeps multiplicity, so two identical rows do not cancel out; and because addition is
// commutative and associative, partial sums over keyset batches, partitions or shards combine exactly, in any
// order, and one new row updates a fingerprint in O(1).
type Fingerprint struct {
	Lo uint64 // lane of hashtextextended(row, 0)
	Hi uint64 // lane of hashtextextended(row, 1)
}

// FingerprintFromRowHashes is the fingerprint of a single row given its two signed hashes as PostgreSQL returns them.
func FingerprintFromRowHashes(h0, h1 int64) Fingerprint {
	return Fingerprint{Lo: uint64(h0), Hi: uint64(h1)}
}

// Add combines two fingerprints of disjoint row sets into the fingerprint of their union.
func (f Fingerprint) Add(g Fingerprint) Fingerprint {
	return Fingerprint{Lo: f.Lo + g.Lo, Hi: f.Hi + g.Hi}
}

// Sub removes the rows fingerprinted by g from f (e.g. a retired row); f.Add(g).Sub(g) == f.
func (f Fingerprint) Sub(g Fingerprint) Fingerprint {
	return Fingerprint{Lo: f.Lo - g.Lo, Hi: f.Hi - g.Hi}
}

// IsZero reports whether f is the fingerprint of the empty set (or of rows that sum to zero).
func (f Fingerprint) IsZero() bool { return f.Lo == 0 && f.Hi == 0 }

// String renders f as 32 lowercase hex digits, Hi then Lo, fixed width; this is the content_hash of a snapshot.
func (f Fingerprint) String() string { return fmt.Sprintf("%016x%016x", f.Hi, f.Lo) }

// MarshalText encodes f as its String form so it reads the same in JSON (snapshot metrics) as anywhere else.
func (f Fingerprint) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText parses the String form.
func (f *Fingerprint) UnmarshalText(b []byte) error {
	g, err := ParseFingerprint(string(b))
	if err != nil {
		return err
	}
	*f = g
	return nil
}

// ParseFingerprint parses the 32-hex-digit form produced by String.
func ParseFingerprint(s string) (Fingerprint, error) {
	if len(s) != 32 {
		return Fingerprint{}, Errorf(EINVALID, "fingerprint %s: want 32 hex digits, got %d characters", Quote(s), len(s))
	}
	hi, err := strconv.ParseUint(s[:16], 16, 64)
	if err != nil {
		return Fingerprint{}, Errorf(EINVALID, "fingerprint %s: high lane is not hex", Quote(s))
	}
	lo, err := strconv.ParseUint(s[16:], 16, 64)
	if err != nil {
		return Fingerprint{}, Errorf(EINVALID, "fingerprint %s: low lane is not hex", Quote(s))
	}
	return Fingerprint{Lo: lo, Hi: hi}, nil
}

// two64 is the lane modulus.
var two64 = new(big.Int).Lsh(big.NewInt(1), 64)

// FingerprintFromSums reduces per-lane sums computed by PostgreSQL (sum(bigint) is numeric: it may be negative or
// wider than 64 bits, and reaches Go as decimal text) to a Fingerprint. The sum of signed hashes mod 2^64 equals
// the wrapping sum of their unsigned forms, so SQL and Go agree bit for bit. An empty group has no sum (NULL):
// callers pass "0" via coalesce.
func FingerprintFromSums(lo, hi string) (Fingerprint, error) {
	l, err := reduceMod64(lo)
	if err != nil {
		return Fingerprint{}, Errorf(EINVALID, "fingerprint low-lane sum: %w", err)
	}
	h, err := reduceMod64(hi)
	if err != nil {
		return Fingerprint{}, Errorf(EINVALID, "fingerprint high-lane sum: %w", err)
	}
	return Fingerprint{Lo: l, Hi: h}, nil
}

// reduceMod64 parses a decimal integer of any size and sign and returns it mod 2^64 in [0, 2^64).
func reduceMod64(s string) (uint64, error) {
	n, ok := new(big.Int).SetString(s, 10)
	if !ok {
		return 0, fmt.Errorf("%q is not a decimal integer", s)
	}
	return n.Mod(n, two64).Uint64(), nil // big.Int.Mod is Euclidean: the result is never negative
}
