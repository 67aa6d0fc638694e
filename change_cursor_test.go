package gcos

import (
	"encoding/base64"
	"testing"
	"time"
)

func TestChangeCursorRoundTrip(t *testing.T) {
	seen, _ := ParseConsistencyToken("100:105:101,103")
	upto, _ := ParseConsistencyToken("104:110:")
	at := time.Date(2026, 11, 28, 8, 0, 0, 123456000, time.UTC)
	for _, c := range []ChangeCursor{
		{Seen: seen},
		{Seen: seen, Upto: &upto, AfterAt: at, AfterID: 42},
	} {
		got, err := ParseChangeCursor(c.String())
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if got.String() != c.String() || got.Seen.String() != c.Seen.String() || (c.Upto == nil) != (got.Upto == nil) ||
			!got.AfterAt.Equal(c.AfterAt) || got.AfterID != c.AfterID {
			t.Fatalf("round trip: %+v → %q → %+v", c, c.String(), got)
		}
	}
}

func TestParseChangeCursorRefusesBadInput(t *testing.T) {
	enc := func(raw string) string { return base64.RawURLEncoding.EncodeToString([]byte(raw)) }
	for _, s := range []string{
		"", "not a cursor!", enc("c0|1:2:||||"), enc("c1|1:2:"), enc("c1|x:2:|||"), enc("c1|1:2:||5|"),
		enc("c1|100:105:|90:95:|0|1"), enc("c1|1:2:|1:3:|x|1"), enc("c1|1:2:|1:3:|1|-1"), enc("c1|1:2:|1:3:|1|"),
	} {
		if _, err := ParseChangeCursor(s); ErrorCode(err) != EINVALID {
			t.Errorf("ParseChangeCursor(%q) = %v, want EINVALID", s, err)
		}
	}
}
