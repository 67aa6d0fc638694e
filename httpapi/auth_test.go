package httpapi

import (
	"crypto/subtle"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"gcos"
)

// TestAuthConstantTime proves the token check uses crypto/subtle and compares against every configured token,
// whichever matches (no early exit that would time which one did).
func TestAuthConstantTime(t *testing.T) {
	t.Parallel()
	a, err := newAuthenticator(gcos.HTTPConfig{ReaderTokens: []string{"r1", "r2", "r3"}, OperatorTokens: []string{"o1", "o2"}})
	if err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(a.compare).Pointer() != reflect.ValueOf(subtle.ConstantTimeCompare).Pointer() {
		t.Fatal("tokens are not compared with subtle.ConstantTimeCompare")
	}
	calls := 0
	a.compare = func(x, y []byte) int {
		calls++
		if len(x) != len(y) {
			t.Errorf("compared digests of different lengths %d and %d", len(x), len(y))
		}
		return subtle.ConstantTimeCompare(x, y)
	}
	for _, tc := range []struct {
		token            string
		reader, operator bool
	}{
		{"r1", true, false}, {"r3", true, false}, {"o1", true, true}, {"o2", true, true}, {"nope", false, false},
		{"r", false, false}, {"r1r1", false, false}, {"", false, false},
	} {
		calls = 0
		reader, operator := a.role(tc.token)
		if reader != tc.reader || operator != tc.operator {
			t.Errorf("role(%q) = %v %v, want %v %v", tc.token, reader, operator, tc.reader, tc.operator)
		}
		if calls != 5 {
			t.Errorf("role(%q) compared %d tokens, want all 5", tc.token, calls)
		}
	}
}

func TestAuthBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []gcos.HTTPConfig{
		{ReaderTokens: []string{""}},
		{OperatorTokens: []string{" padded "}},
	} {
		if _, err := newAuthenticator(cfg); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("%+v: err %v, want EINVALID", cfg, err)
		}
	}
}

func TestAuthBearerParsing(t *testing.T) {
	t.Parallel()
	for header, want := range map[string]string{
		"Bearer abc":    "abc",
		"bearer abc":    "abc",
		"BEARER  abc  ": "abc",
		"Basic abc":     "",
		"Bearer":        "",
		"Bearer ":       "",
		"abc":           "",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", header)
		got, ok := bearer(r)
		if got != want || ok != (want != "") {
			t.Errorf("bearer(%q) = %q %v, want %q", header, got, ok, want)
		}
	}
}

func TestCheckListen(t *testing.T) {
	t.Parallel()
	tokens := []string{"reader-token"}
	for _, tc := range []struct {
		addr     string
		insecure bool
		tokens   []string
		want     string // "" accepted, else a word the refusal must contain
	}{
		{"127.0.0.1:8080", true, nil, ""},
		{"[::1]:8080", true, nil, ""},
		{"localhost:8080", true, nil, ""},
		{"127.1.2.3:1", true, nil, ""},
		{"127.0.0.1:8080", false, nil, ""},
		{"0.0.0.0:8080", true, tokens, "--insecure-no-auth"},
		{":8080", true, nil, "--insecure-no-auth"},
		{"10.0.0.5:8080", true, nil, "--insecure-no-auth"},
		{"example.com:8080", true, nil, "--insecure-no-auth"},
		{"0.0.0.0:8080", false, tokens, ""},
		{":8080", false, tokens, ""},
		{"0.0.0.0:8080", false, nil, "GCOS_READER_TOKEN"},
		{":8080", false, nil, "--listen"},
		{"no-port", false, tokens, "--listen"},
	} {
		err := CheckListen(gcos.HTTPConfig{Listen: tc.addr, InsecureNoAuth: tc.insecure, ReaderTokens: tc.tokens})
		if (err == nil) != (tc.want == "") {
			t.Errorf("CheckListen(%q, insecure=%v, tokens=%d) = %v, want ok=%v", tc.addr, tc.insecure, len(tc.tokens), err, tc.want == "")
			continue
		}
		if err == nil {
			continue
		}
		if gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("CheckListen(%q): code %s, want EINVALID", tc.addr, gcos.ErrorCode(err))
		}
		if !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckListen(%q) = %q, want it to name %s", tc.addr, err, tc.want)
		}
	}
}
