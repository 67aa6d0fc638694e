package gcos_test

import (
	"testing"

	"gcos"
)

func TestConsistencyToken(t *testing.T) {
	t.Parallel()
	parse := func(s string) gcos.ConsistencyToken {
		t.Helper()
		tok, err := gcos.ParseConsistencyToken(s)
		if err != nil {
			t.Fatalf("parse %q: %v", s, err)
		}
		if tok.String() != s {
			t.Fatalf("%q reads back as %q", s, tok.String())
		}
		return tok
	}
	for _, tt := range []struct {
		name, reader, token string
		covers              bool
	}{
		{"the same instant", "100:105:101,103", "100:105:101,103", true},
		{"later, everything finished", "110:110:", "100:105:101,103", true},
		{"later, the token's in-progress ids still running", "101:112:101,103,111", "100:105:101,103", true},
		{"later, but an id the token saw committed still runs for the reader", "102:112:102,111", "100:105:101,103", false},
		{"earlier: the reader cannot place the token's last ids", "100:104:101,103", "100:105:101,103", false},
		{"earlier, nothing in flight", "90:90:", "100:100:", false},
		{"a reader's in-progress id above the token's xmax does not matter", "100:120:115", "100:105:", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := parse(tt.reader).Covers(parse(tt.token)); got != tt.covers {
				t.Fatalf("%s covers %s = %v, want %v", tt.reader, tt.token, got, tt.covers)
			}
		})
	}
	for _, bad := range []string{"", "1:2", "a:2:", "1:b:", "3:2:", "1:5:7", "1:5:x", "1:5:4,2", "1:2:3:4", "-1:2:"} {
		if _, err := gcos.ParseConsistencyToken(bad); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("token %q: %v, want EINVALID", bad, err)
		}
	}
}
