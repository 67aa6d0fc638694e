package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gcos/daemon"
	"gcos/gcostest"
	"gcos/postgres/pgtest"
)

// TestNoOpenDoorOnLoopback runs `gcos up --listen 127.0.0.1:…` and asks it over real sockets. With no token
// configured, and again with a reader token configured: no token and a wrong token are 401 (the 0600 run token in
// the data dir is what the CLI beside it uses); a reader token on an operator route is 403. The dashboard's login
// link (the daemon prints one at start; `gcos login` mints another) sets an HttpOnly, SameSite=Strict session
// cookie once, acting as whoever minted it with that caller's roles, and works no second time.
func TestNoOpenDoorOnLoopback(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 600, Seed: 63})
	dsn := pgtest.DSN(w.Pool)
	const readerToken = "reader-token-for-the-door-test"
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	type answer struct {
		status int
		header http.Header
		body   string
	}
	do := func(method, url, token, cookie string, hdr ...string) answer {
		t.Helper()
		req, err := http.NewRequest(method, url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if cookie != "" {
			req.AddCookie(&http.Cookie{Name: "gcos_session", Value: cookie})
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	expect := func(what string, got answer, want int) {
		t.Helper()
		if got.status != want {
			t.Errorf("%s: %d, want %d\n%s", what, got.status, want, got.body)
		}
	}

	for _, tc := range []struct {
		name, config string
	}{
		{"no token configured", ""},
		{"a reader token configured", `{"http": {"reader_tokens": ["` + readerToken + `"]}}`},
	} {
		dir := t.TempDir()
		args := []string{"--database-url", dsn, "--data-dir", dir}
		if tc.config != "" {
			path := filepath.Join(dir, "gcos.json")
			if err := os.WriteFile(path, []byte(tc.config), 0o600); err != nil {
				t.Fatal(err)
			}
			args = append(args, "--config", path)
		}
		stop := startUp(t, append(args, "up", "--listen", "127.0.0.1:0")...)
		run, runToken, err := daemon.Discover(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		me := run.URL + "/v1/me"
		if got := do(http.MethodGet, me, "", ""); got.status != http.StatusUnauthorized || got.header.Get("WWW-Authenticate") == "" {
			t.Errorf("%s: no token: %d %q, want 401 with WWW-Authenticate\n%s", tc.name, got.status, got.header.Get("WWW-Authenticate"), got.body)
		}
		expect(tc.name+": a wrong token", do(http.MethodGet, me, "wrong", ""), http.StatusUnauthorized)
		expect(tc.name+": not a bearer token", do(http.MethodGet, me, "", "", "Authorization", "Basic Zm9vOmJhcg=="), http.StatusUnauthorized)
		expect(tc.name+": the run token", do(http.MethodGet, me, runToken, ""), http.StatusOK)
		expect(tc.name+": an unknown session", do(http.MethodGet, me, "", "no-such-session"), http.StatusUnauthorized)
		expect(tc.name+": the public health probe", do(http.MethodGet, run.URL+"/healthz", "", ""), http.StatusOK)
		if tc.config != "" {
			expect(tc.name+": a reader token on an operator route", do(http.MethodPost, run.URL+"/v1/notifications/mute", readerToken, ""), http.StatusForbidden)
			expect(tc.name+": a reader token on a reader route", do(http.MethodGet, me, readerToken, ""), http.StatusOK)
		}

		// `gcos login` beside the daemon: a link that works once and opens a session acting as the local caller.
		code, stdout, stderr := runGate(t, append(args, "login", "--json", "--by", "door-tester")...)
		var link LoginLink
		if code != 0 || json.Unmarshal([]byte(stdout), &link) != nil || !strings.HasPrefix(link.URL, run.URL+"/login?code=") {
			t.Fatalf("%s: gcos login: exit %d %q\n%s", tc.name, code, stdout, stderr)
		}
		first := do(http.MethodGet, link.URL, "", "")
		var session *http.Cookie
		for _, c := range (&http.Response{Header: first.header}).Cookies() {
			if c.Name == "gcos_session" {
				session = c
			}
		}
		if first.status != http.StatusSeeOther || first.header.Get("Location") != "/" || session == nil ||
			!session.HttpOnly || session.SameSite != http.SameSiteStrictMode || session.Domain != "" || session.Path != "/" {
			t.Fatalf("%s: the login link: %d, Location %q, cookie %+v; want 303 to / with an HttpOnly, SameSite=Strict, host-only cookie",
				tc.name, first.status, first.header.Get("Location"), session)
		}
		expect(tc.name+": the login link a second time", do(http.MethodGet, link.URL, "", ""), http.StatusUnauthorized)
		got := do(http.MethodGet, me, "", session.Value)
		expect(tc.name+": the session", got, http.StatusOK)
		if !strings.Contains(got.body, `"door-tester"`) {
			t.Errorf("%s: the session acts as %s, want door-tester (who ran gcos login)", tc.name, got.body)
		}
		if page := do(http.MethodGet, run.URL+"/", "", session.Value); !strings.Contains(page.body, `data-auth="session"`) {
			t.Errorf("%s: the dashboard with a session does not say so", tc.name)
		}
		expect(tc.name+": a cross-site POST riding the session", do(http.MethodPost, run.URL+"/v1/notifications/mute", "", session.Value,
			"Sec-Fetch-Site", "cross-site"), http.StatusForbidden)
		if tc.config != "" {
			// A reader's link opens a reader's session: its roles, not the daemon's.
			minted := do(http.MethodPost, run.URL+"/v1/login-links", readerToken, "")
			var rl LoginLink
			if minted.status != http.StatusCreated || json.Unmarshal([]byte(minted.body), &rl) != nil {
				t.Fatalf("%s: a reader mints a link: %d %s", tc.name, minted.status, minted.body)
			}
			var reader *http.Cookie
			for _, c := range (&http.Response{Header: do(http.MethodGet, rl.URL, "", "").header}).Cookies() {
				reader = c
			}
			if reader == nil {
				t.Fatalf("%s: the reader's link set no cookie", tc.name)
			}
			expect(tc.name+": a reader's session on a reader route", do(http.MethodGet, me, "", reader.Value), http.StatusOK)
			expect(tc.name+": a reader's session on an operator route", do(http.MethodPost, run.URL+"/v1/notifications/mute", "", reader.Value), http.StatusForbidden)
		}
		exit, log := stop()
		if exit != 0 || !strings.Contains(log, "login link") || !strings.Contains(log, "/login?code=") {
			t.Errorf("%s: gcos up exited %d and printed no login link:\n%s", tc.name, exit, log)
		}
		if strings.Contains(log, "authentication is OFF") {
			t.Errorf("%s: gcos up says authentication is off:\n%s", tc.name, log)
		}
	}
}
