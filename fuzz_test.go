package gcos_test

import (
	"strings"
	"testing"
	"unicode/utf8"

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

// cleanMessage fails t unless msg is a clear refusal: non-empty, no control character or invalid UTF-8 (input is
// repeated escaped), and bounded (input is repeated shortened).
func cleanMessage(t *testing.T, what string, err error) {
	t.Helper()
	msg := gcos.ErrorMessage(err)
	if gcos.ErrorCode(err) != gcos.EINVALID || msg == "" || !utf8.ValidString(msg) ||
		strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) || len(msg) > 2048 {
		t.Fatalf("%s: refused with code %s and an unclear message %q", what, gcos.ErrorCode(err), msg)
	}
}

// FuzzParseConfig: any configuration file is either refused with a clear EINVALID error naming what is wrong, or
// yields a configuration that validates and classifies changelog rows without panicking.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"http": {"listen": "127.0.0.1:9090", "reader_tokens": ["r"], "login_link_ttl": "5m"}}`))
	f.Add([]byte(`{"intake": {"changelog_kinds": [{"entity_type": "own*", "action": "[", "kind": "owner_changed"}]}}`))
	f.Add([]byte(`{"ttl": {"default": "1h", "by_risk": {"high": "0s"}}, "scan": {"storm_fraction": 2}}`))
	f.Add([]byte(`{"principals": [{"name": "a", "roles": ["approver"], "tokens": ["t", "t"]}]}`))
	f.Add([]byte("{\"\x1b[2J\": 1}"))
	f.Add([]byte(`{"http": {"listen": "0.0.0.0:80", "insecure_no_auth": true}}`))
	f.Add([]byte(`[1, 2]`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		c, err := gcos.ParseConfig(doc, "fuzz.json")
		if err != nil {
			cleanMessage(t, "config", err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("an accepted configuration does not validate: %v", err)
		}
		c.Intake.ClassifyChangelog("ownership", "update")
		c.Intake.Trusted("svc/etl")
	})
}

// FuzzClassifyChangelog: the change-ledger row → change kind mapping (the shipped rules, after one rule from the
// input) never panics; a row it maps gets a known change kind or the rule's skip, and a configuration holding a
// rule the validation refuses never classifies.
func FuzzClassifyChangelog(f *testing.F) {
	f.Add("ownership", "update", "own*", "*", string(gcos.ChangeAuthority))
	f.Add("exception", "delete", "", "", "skip")
	f.Add("EXCEPTION", "Insert", "[e]xception", "ins?rt", "not_a_kind")
	f.Add("x\x00y", "\xff", "\\", "[^", "")
	f.Fuzz(func(t *testing.T, entityType, action, rulePattern, ruleAction, ruleKind string) {
		c := gcos.DefaultConfig()
		c.Intake.ChangelogKinds = append([]gcos.ChangelogRule{{EntityType: rulePattern, Action: ruleAction, Kind: ruleKind}}, c.Intake.ChangelogKinds...)
		if err := c.Validate(); err != nil {
			cleanMessage(t, "changelog rule", err)
			return
		}
		kind, matched := c.Intake.ClassifyChangelog(entityType, action)
		if !matched {
			if kind != "" {
				t.Fatalf("(%q, %q): no rule matched, yet kind %q", entityType, action, kind)
			}
			return
		}
		if kind != "" {
			if _, err := gcos.ParseChangeKind(string(kind)); err != nil {
				t.Fatalf("(%q, %q) maps to %q, not a change kind", entityType, action, kind)
			}
		}
		if again, _ := c.Intake.ClassifyChangelog(entityType, action); again != kind {
			t.Fatalf("(%q, %q) maps to %q, then to %q", entityType, action, kind, again)
		}
	})
}

// FuzzConsistencyToken: any text is a token that prints back as itself and covers itself, or a clear refusal.
func FuzzConsistencyToken(f *testing.F) {
	for _, s := range []string{"100:105:101,103", "7:7:", "5:3:", "1:9:9", "1:9:4,2", "a:b:c", "", "::", "18446744073709551615:18446744073709551615:", "1:2:1\x1b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, err := gcos.ParseConsistencyToken(s)
		if err != nil {
			cleanMessage(t, "token", err)
			return
		}
		back, err := gcos.ParseConsistencyToken(tok.String())
		if err != nil || !cmp.Equal(back, tok) || !tok.Covers(tok) {
			t.Fatalf("%q: read as %+v, printed %q, read back %+v (%v)", s, tok, tok.String(), back, err)
		}
	})
}

// FuzzChangeCursor: any text is a feed cursor that prints back as itself, or a clear refusal.
func FuzzChangeCursor(f *testing.F) {
	for _, s := range []string{"", "start", "YzF8MTAwOjEwNTp8fHw", "YzF8MTAwOjEwNTp8MTAwOjEwNTp8MTc2NDAwMDAwMDAwMDAwMHw0Mg", "\x1b", "!!!!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := gcos.ParseChangeCursor(s)
		if err != nil {
			cleanMessage(t, "cursor", err)
			return
		}
		back, err := gcos.ParseChangeCursor(c.String())
		if err != nil || back.String() != c.String() {
			t.Fatalf("%q: read as %+v, printed %q, read back %+v (%v)", s, c, c.String(), back, err)
		}
	})
}

// FuzzGlob: the trust glob (trusted sources, changelog rules, subscriptions) compiles any pattern or refuses it;
// a compiled pattern matches any name without panicking, agrees with MatchGlob, and a pattern that escapes every
// character of a name matches exactly that name, in either case with fold.
func FuzzGlob(f *testing.F) {
	for _, p := range []string{"*", "svc/*", "a?c", "[a-c]x", "[^a]", "\\*", "[", "\\", "", "**", "ß*", "[]]"} {
		f.Add(p, "svc/etl", false)
	}
	f.Fuzz(func(t *testing.T, pattern, name string, fold bool) {
		g, err := gcos.ParseGlob(pattern, fold)
		if err == nil && g.Match(name) != gcos.MatchGlob(pattern, name, fold) {
			t.Fatalf("%q on %q: Match and MatchGlob disagree", pattern, name)
		}
		if err == nil && pattern == "*" && !g.Match(name) {
			t.Fatalf("* does not match %q", name)
		}
		if name == "" || !utf8.ValidString(name) {
			return
		}
		var escaped strings.Builder
		for _, r := range name {
			escaped.WriteRune('\\')
			escaped.WriteRune(r)
		}
		lit, err := gcos.ParseGlob(escaped.String(), fold)
		if err != nil {
			t.Fatalf("the escaped literal %q is refused: %v", escaped.String(), err)
		}
		if !lit.Match(name) || lit.Match(name+"x") || lit.Match("x"+name) {
			t.Fatalf("the escaped literal of %q matches wrongly", name)
		}
	})
}
