package httpapi

import (
	"crypto/subtle"
	"net/http/httptest"
	"reflect"
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
	for _, tc := range []struct {
		addr     string
		insecure bool
		ok       bool
	}{
		{"127.0.0.1:8080", true, true},
		{"[::1]:8080", true, true},
		{"localhost:8080", true, true},
		{"127.1.2.3:1", true, true},
		{"0.0.0.0:8080", true, false},
		{":8080", true, false},
		{"10.0.0.5:8080", true, false},
		{"example.com:8080", true, false},
		{"0.0.0.0:8080", false, true},
		{":8080", false, true},
		{"no-port", false, false},
	} {
		err := CheckListen(tc.addr, tc.insecure)
		if (err == nil) != tc.ok {
			t.Errorf("CheckListen(%q, %v) = %v, want ok=%v", tc.addr, tc.insecure, err, tc.ok)
		}
		if err != nil && gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("CheckListen(%q): code %s, want EINVALID", tc.addr, gcos.ErrorCode(err))
		}
	}
}
