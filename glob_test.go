package gcos

import "testing"

func TestGlob(t *testing.T) {
	cases := []struct {
		pattern, name string
		fold, want    bool
	}{
		{"*", "svc/etl", false, true},
		{"*", "s7-America/New_York", false, true},
		{"*", "birth-api", false, true},
		{"svc/*", "svc/etl", false, true},
		{"svc/*", "svc/etl/nightly", false, true},
		{"svc/*", "svc", false, false},
		{"birth-*", "birth-api", false, true},
		{"birth-*", "import-2024", false, false},
		{"birth-?pi", "birth-api", false, true},
		{"birth-?pi", "birth-/pi", false, true},
		{"[ab]*", "alpha", false, true},
		{"[^ab]*", "alpha", false, false},
		{"[a-c]x", "bx", false, true},
		{`gcos\*`, "gcos*", false, true},
		{`gcos\*`, "gcos:x", false, false},
		{"a.b", "axb", false, false}, // no regexp leaks through
		{"a+b", "a+b", false, true},
		{"Birth-*", "birth-api", false, false},
		{"Birth-*", "birth-api", true, true},
		{"registry-sync", "registry-sync", false, true},
		{"registry-sync", "registry-sync2", false, false}, // whole name
	}
	for _, c := range cases {
		g, err := ParseGlob(c.pattern, c.fold)
		if err != nil {
			t.Fatalf("ParseGlob(%q): %v", c.pattern, err)
		}
		if got := g.Match(c.name); got != c.want {
			t.Errorf("%q matching %q (fold %v) = %v, want %v", c.pattern, c.name, c.fold, got, c.want)
		}
	}
	for _, bad := range []string{"", "[abc", `x\`, "[]", "[^]"} {
		if _, err := ParseGlob(bad, false); err == nil {
			t.Errorf("ParseGlob(%q) accepted a malformed pattern", bad)
		}
	}
}

func TestGlobLiteralPrefix(t *testing.T) {
	for _, c := range []struct {
		pattern, prefix string
		literal         bool
	}{
		{"governance.handoff.heartbeat", "governance.handoff.heartbeat", true},
		{"governance.*", "governance.", false},
		{"governance.*.heartbeat", "governance.", false},
		{"gov?rnance", "gov", false},
		{"[ab]x", "", false},
		{`a\*`, "a", false},
		{"*", "", false},
	} {
		g, err := ParseGlob(c.pattern, false)
		if err != nil {
			t.Fatalf("ParseGlob(%q): %v", c.pattern, err)
		}
		if prefix, literal := g.LiteralPrefix(); prefix != c.prefix || literal != c.literal {
			t.Errorf("LiteralPrefix(%q) = %q, %v; want %q, %v", c.pattern, prefix, literal, c.prefix, c.literal)
		}
	}
}

func TestDefaultConfigTrustsEveryNamedSource(t *testing.T) {
	in := DefaultConfig().Intake
	for _, s := range []string{"birth-api", "svc/etl", "s7-America/New_York", "gcos:backfill", "a b"} {
		if !in.Trusted(s) {
			t.Errorf("the default configuration does not trust %q", s)
		}
	}
	if in.Trusted("") {
		t.Error("an empty source system is trusted")
	}
}

// The fast paths (any, literal, prefix) agree with the regexp on every case.
func TestGlobFastPathsAgreeWithTheRegexp(t *testing.T) {
	names := []string{"", "birth-api", "BIRTH-API", "birth-", "birth", "svc/etl", "registry-sync", "Registry-Sync", "ü-x", "Ü-x", "bírth-api", "\u212Airth-api"}
	for _, pattern := range []string{"*", "birth-*", "registry-sync", "Birth-*", "svc/*", "ü-*"} {
		for _, fold := range []bool{false, true} {
			g, err := ParseGlob(pattern, fold)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range names {
				if got, want := g.Match(name), g.re.MatchString(name); got != want {
					t.Errorf("%q (fold %v) on %q: fast path %v, regexp %v", pattern, fold, name, got, want)
				}
			}
		}
	}
}
