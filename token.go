package gcos

import (
	"slices"
	"strconv"
	"strings"
)

// ConsistencyToken names an instant of the database GCOS runs on: the PostgreSQL snapshot (pg_current_snapshot) a
// reader took, or one taken after a write committed (SPEC §12 freshness, in the manner of SpiceDB's ZedTokens). A
// gate decision is at least as fresh as a token when it reads every transaction the token's snapshot sees as
// committed. Its text is the snapshot's: "xmin:xmax:xip,…".
type ConsistencyToken struct {
	Xmin, Xmax uint64
	Xip        []uint64 // in progress at the instant, ascending
}

// ParseConsistencyToken reads a token's text; anything else is a clear EINVALID error.
func ParseConsistencyToken(s string) (ConsistencyToken, error) {
	bad := func(why string) (ConsistencyToken, error) {
		return ConsistencyToken{}, Errorf(EINVALID, "consistency token %s: %s (want the token a GCOS write or answer returned, xmin:xmax:xip,…)", Quote(s), why)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return bad("not three fields")
	}
	var t ConsistencyToken
	var err error
	if t.Xmin, err = strconv.ParseUint(parts[0], 10, 64); err != nil {
		return bad("xmin is not a transaction id")
	}
	if t.Xmax, err = strconv.ParseUint(parts[1], 10, 64); err != nil {
		return bad("xmax is not a transaction id")
	}
	if t.Xmin > t.Xmax {
		return bad("xmin is above xmax")
	}
	if parts[2] != "" {
		for _, f := range strings.Split(parts[2], ",") {
			x, err := strconv.ParseUint(f, 10, 64)
			if err != nil {
				return bad("an in-progress id is not a transaction id")
			}
			if x < t.Xmin || x >= t.Xmax {
				return bad("an in-progress id lies outside [xmin, xmax)")
			}
			t.Xip = append(t.Xip, x)
		}
		if !slices.IsSorted(t.Xip) {
			return bad("the in-progress ids are not ascending")
		}
	}
	return t, nil
}

// String is the token's text.
func (t ConsistencyToken) String() string {
	var b strings.Builder
	b.WriteString(strconv.FormatUint(t.Xmin, 10) + ":" + strconv.FormatUint(t.Xmax, 10) + ":")
	for i, x := range t.Xip {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatUint(x, 10))
	}
	return b.String()
}

// Covers reports whether a read at t sees every transaction a read at u saw as committed: every id below u's xmax
// and not in progress for u is below t's xmax and not in progress for t. It is conservative: an id t cannot
// place (at or above its xmax) counts as unseen.
func (t ConsistencyToken) Covers(u ConsistencyToken) bool {
	if t.Xmax < u.Xmax {
		return false
	}
	for _, x := range t.Xip {
		if x < u.Xmax {
			if _, found := slices.BinarySearch(u.Xip, x); !found {
				return false
			}
		}
	}
	return true
}
