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
	a, err := newAuthenticator(gcos.HTTPConfig{ReaderTokens: []string{"r1", "r2", "r3"}, OperatorTokens: []string{"o1", "o2"}},
		[]gcos.Principal{{Name: "alice", Roles: []string{gcos.RoleReader, gcos.RoleApprover}, Tokens: []string{"a1"}}}, nil)
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
		token, principal string
		roles            string
	}{
		{"r1", "token:", "reader"}, {"r3", "token:", "reader"}, {"o1", "token:", "reader,operator"},
		{"o2", "token:", "reader,operator"}, {"a1", "alice", "reader,approver"},
		{"nope", "", ""}, {"r", "", ""}, {"r1r1", "", ""}, {"", "", ""},
	} {
		calls = 0
		c, ok := a.caller(tc.token)
		if ok != (tc.principal != "") || !strings.HasPrefix(c.Principal, tc.principal) || strings.Join(c.Roles, ",") != tc.roles {
			t.Errorf("caller(%q) = %+v %v, want principal %q… roles %q", tc.token, c, ok, tc.principal, tc.roles)
		}
		if calls != 6 {
			t.Errorf("caller(%q) compared %d tokens, want all 6", tc.token, calls)
		}
	}
	// A plain token is an identity of its own, stable and not its text.
	c1, _ := a.caller("o1")
	c2, _ := a.caller("o2")
	if c1.Principal == c2.Principal || strings.Contains(c1.Principal, "o1") {
		t.Errorf("plain tokens' principals %q, %q: want distinct names that do not show the token", c1.Principal, c2.Principal)
	}
}

func TestAuthBadConfig(t *testing.T) {
	t.Parallel()
	for _, cfg := range []gcos.HTTPConfig{
		{ReaderTokens: []string{""}},
		{OperatorTokens: []string{" padded "}},
	} {
		if _, err := newAuthenticator(cfg, nil, nil); gcos.ErrorCode(err) != gcos.EINVALID {
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
		err := CheckListen(gcos.HTTPConfig{Listen: tc.addr, InsecureNoAuth: tc.insecure, ReaderTokens: tc.tokens}, nil)
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
