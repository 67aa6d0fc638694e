package gcos_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"

	"gcos"
)

func TestCheckParam(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, value string
		want        string // "" accepted, else part of the message
	}{
		{"object", "birth_registry:B-1", ""},
		{"object", "café:ünïcode", ""},
		{"object", "", ""},
		{"object", strings.Repeat("a", gcos.MaxParamBytes), ""},
		{"object", strings.Repeat("a", gcos.MaxParamBytes+1), "longer than 512"},
		{"object", "x:\xff", "not valid UTF-8"},
		{"object", "x:\x00", "NUL byte"},
		{"group", "a\nb", "control characters"},
		{"group", "a\x7fb", "control characters"},
		{"object", "users:\u202eevil", "non-printing character U+202E"},
		{"object", "users:a\u200bb", "non-printing character U+200B"},
		{"object", "\ufeffusers:a", "non-printing character U+FEFF"},
		{"object", "users:a b", ""},
		{"\xffname", "v", "name is not valid UTF-8"},
	} {
		err := gcos.CheckParam(tc.name, tc.value)
		if (err == nil) != (tc.want == "") {
			t.Errorf("CheckParam(%q, %q) = %v, want ok=%v", tc.name, tc.value, err, tc.want == "")
			continue
		}
		if err == nil {
			continue
		}
		if gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckParam(%q, %q) = %v (%s), want EINVALID naming %q", tc.name, tc.value, err, gcos.ErrorCode(err), tc.want)
		}
		if !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.name)) {
			t.Errorf("CheckParam(%q): %v does not name the parameter", tc.name, err)
		}
	}
}

// TestQuoteEchoesSafely: a value repeated in a message is quoted with every control character, escape sequence,
// bidirectional override and invalid byte escaped, and shortened past MaxEchoRunes characters with its length
// said; Shown prints a clean value as itself; EchoParam repeats a value CheckParam accepts unchanged.
func TestQuoteEchoesSafely(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("é", 100)
	for _, tc := range []struct {
		in, quote, shown string
	}{
		{"users:u-1", `"users:u-1"`, "users:u-1"},
		{"", `""`, ""},
		{"a\x1b[31mred", `"a\x1b[31mred"`, `"a\x1b[31mred"`},
		{"tab\there", `"tab\there"`, `"tab\there"`},
		{"bidi\u202eevil", `"bidi\u202eevil"`, `"bidi\u202eevil"`},
		{"bad\xffutf8", `"bad\xffutf8"`, `"bad\xffutf8"`},
		{"new\nline", `"new\nline"`, `"new\nline"`},
		{long, `"` + strings.Repeat("é", gcos.MaxEchoRunes) + `"… (200 bytes)`, `"` + strings.Repeat("é", gcos.MaxEchoRunes) + `"… (200 bytes)`},
		{strings.Repeat("x", gcos.MaxEchoRunes), `"` + strings.Repeat("x", gcos.MaxEchoRunes) + `"`, strings.Repeat("x", gcos.MaxEchoRunes)},
	} {
		if got := gcos.Quote(tc.in); got != tc.quote {
			t.Errorf("Quote(%q) = %s, want %s", tc.in, got, tc.quote)
		}
		if got := gcos.Shown(tc.in); got != tc.shown {
			t.Errorf("Shown(%q) = %s, want %s", tc.in, got, tc.shown)
		}
		if got := gcos.Quote(tc.in); strings.ContainsFunc(got, func(r rune) bool { return r < 0x20 || r == 0x7f || r == 0x202e }) || !utf8.ValidString(got) {
			t.Errorf("Quote(%q) = %q still carries a control character or invalid UTF-8", tc.in, got)
		}
	}
	// A value longer than CheckParam allows is refused, and repeated shortened; one it accepts is repeated as is.
	if got := gcos.EchoParam("object", "a:"+strings.Repeat("x", 5000)); len(got) > 100 || !strings.HasSuffix(got, "(5002 bytes)") {
		t.Errorf("EchoParam of a 5,002-byte value: %s", got)
	}
	if id := "users:" + strings.Repeat("u", 100); gcos.EchoParam("object", id) != id {
		t.Error("EchoParam changed a value CheckParam accepts")
	}
}
