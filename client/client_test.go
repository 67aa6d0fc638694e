package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"gcos"
	"gcos/client"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/httpapi"
)

const readerToken = "reader-token-0123456789"

// quick is a client that retries fast (the faults below are answered at once).
func quick(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithToken(readerToken), client.WithBackoff(time.Millisecond, 5*time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// served is a ready world of births births and the API over it (reader token readerToken), closed with the test.
func served(t *testing.T, births int, seed uint64) (*gcostest.World, *httptest.Server) {
	t.Helper()
	// Questions with a token run the intake in the test (gcostest.World.HandOff): a race-instrumented pass on a busy
	// machine may take longer than the default gate.timeout, which no test here is about.
	w := gcostest.Ready(t, gcostest.Options{Births: births, Seed: seed, Config: func(c *gcos.Config) { c.Gate.Timeout = gcos.Duration(time.Minute) }})
	// No daemon runs: a question with a token runs the intake itself.
	g := gate.New(w.Store, nil, gate.WithHandOff(w.HandOff(t)))
	h, err := httpapi.New(httpapi.Config{Store: w.Store, Gate: g, HTTP: gcos.HTTPConfig{Listen: "127.0.0.1:0", ReaderTokens: []string{readerToken}},
		Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return w, srv
}

// TestAgainstTheServer: the client's answers are the server's, single and batch, in order, from one instant.
func TestAgainstTheServer(t *testing.T) {
	t.Parallel()
	w, srv := served(t, 3000, 11)
	c := quick(t, srv.URL)
	objects := w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry WHERE id % 29 = 0 ORDER BY id LIMIT 60`)
	objects = append(objects, "no_such_collection:nothing")
	checks := make([]gcos.GateCheck, len(objects))
	for i, o := range objects {
		checks[i] = gcos.GateCheck{Object: o}
		if i%3 == 0 {
			checks[i].Action = gcos.ActionRead
		}
	}
	batch := c.GateBatch(w.Ctx, checks)
	if batch.Err != nil || len(batch.Decisions) != len(checks) || batch.Token == "" || batch.Allowed == 0 || batch.Blocked == 0 || batch.AllAllowed() {
		t.Fatalf("batch: err %v, %d decisions, token %q, %d allowed, %d blocked", batch.Err, len(batch.Decisions), batch.Token, batch.Allowed, batch.Blocked)
	}
	for i, ch := range checks {
		one := c.Gate(w.Ctx, ch.Object, ch.Action)
		store := gate.New(w.Store, nil).Decide(w.Ctx, ch.Object, batch.Decisions[i].Action)
		d := batch.Decisions[i]
		if one.Err != nil || one.Decision != d.Decision || one.Reason != d.Reason || d.Decision != store.Decision || one.Token == "" {
			t.Fatalf("%s %s: batch %s %q, single %s %q (err %v), store %s", ch.Object, d.Action, d.Decision, d.Reason, one.Decision, one.Reason, one.Err, store.Decision)
		}
	}
	// An allowed object, asked at least as fresh as an earlier answer and on the database, still allowed.
	for _, d := range batch.Decisions {
		if d.Allowed() {
			a := c.Gate(w.Ctx, d.Object, d.Action, client.AtLeast(batch.Token), client.Full())
			if !a.Allowed() || a.Source != "database" {
				t.Fatalf("%s at least %s, full: %+v", d.Object, batch.Token, a)
			}
			break
		}
	}
	// The server's refusal is a block with its error, not retried.
	if a := c.Gate(w.Ctx, "nocolon", gcos.ActionWrite); a.Allowed() || a.Err == nil || !strings.Contains(a.Reason, "COLLECTION:CODE") {
		t.Fatalf("malformed object: %+v", a)
	}
	if b := c.GateBatch(w.Ctx, nil); b.AllAllowed() || b.Err == nil || !strings.Contains(b.Err.Error(), "no checks") {
		t.Fatalf("empty batch: %+v", b)
	}
	// A wrong token is a block.
	if a := quick(t, srv.URL, client.WithToken("wrong")).Gate(w.Ctx, objects[0], ""); a.Allowed() || a.Err == nil || !strings.Contains(a.Err.Error(), "401") {
		t.Fatalf("wrong token: %+v", a)
	}
}

// TestGetAndPost: Get and Post reach the API's other routes: the answer decoded, an error answer a *ServerError
// with the API's code, a read retried through a temporary refusal and an action sent once, headers on every request.
func TestGetAndPost(t *testing.T) {
	t.Parallel()
	w, srv := served(t, 1000, 5)
	c := quick(t, srv.URL)
	object := w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 1`)[0]
	var ex gate.Explanation
	if err := c.Get(w.Ctx, "/v1/explain", url.Values{"object": {object}}, &ex); err != nil || ex.Subject != object || len(ex.Statements) == 0 {
		t.Fatalf("explain %s: %+v %v", object, ex, err)
	}
	var se *client.ServerError
	if err := c.Get(w.Ctx, "/v1/explain", nil, &ex); !errors.As(err, &se) || se.Status != http.StatusBadRequest || se.Code != gcos.EINVALID {
		t.Fatalf("explain with no subject: %v, want a 400 %s", err, gcos.EINVALID)
	}
	// A reader may not resolve a finding: the refusal comes back with its code, nothing retried.
	if err := c.Post(w.Ctx, "/v1/findings/1/resolve", httpapi.ResolveRequest{Reason: "test"}, &struct{}{}); !errors.As(err, &se) || se.Status != http.StatusForbidden {
		t.Fatalf("a reader resolving a finding: %v, want a 403", err)
	}

	busy, n := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
		if r.Header.Get("X-Test") != "yes" {
			t.Errorf("%s %s without the client's header", r.Method, r.URL.Path)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	b := quick(t, busy.URL).With(client.WithHeader("X-Test", "yes"))
	if err := b.Get(w.Ctx, "/v1/findings", nil, &struct{}{}); !errors.As(err, &se) || se.Status != http.StatusServiceUnavailable || n.Load() != 4 {
		t.Fatalf("a read refused as busy: %v after %d requests, want 503 after 4", err, n.Load())
	}
	n.Store(0)
	if err := b.Post(w.Ctx, "/v1/notifications/read", map[string]bool{"all": true}, &struct{}{}); !errors.As(err, &se) || n.Load() != 1 {
		t.Fatalf("an action refused as busy: %v after %d requests, want one request", err, n.Load())
	}
}

// fault is a stand-in server that answers every request with answer (the attempt number counts from 1).
func fault(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, attempt int64)) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(w, r, n.Add(1))
		_, _ = io.Copy(io.Discard, r.Body)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// echo answers each question with decision d, as the server would shape it.
func echo(d string) func(w http.ResponseWriter, r *http.Request, attempt int64) {
	return func(w http.ResponseWriter, r *http.Request, _ int64) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodGet {
			_ = json.NewEncoder(w).Encode(gcos.GateAnswer{Object: r.URL.Query().Get("object"), Action: r.URL.Query().Get("action"), Decision: d, Reason: "stand-in"})
			return
		}
		var b gcos.GateBatch
		_ = json.NewDecoder(r.Body).Decode(&b)
		answers := make([]gcos.GateAnswer, len(b.Checks))
		for i, c := range b.Checks {
			answers[i] = gcos.GateAnswer{Object: c.Object, Action: c.Action, Decision: d, Reason: "stand-in"}
		}
		_ = json.NewEncoder(w).Encode(gcos.NewGateBatchAnswer(answers))
	}
}

// TestFailsClosed: whatever goes wrong between the client and a decision, the answer is a block with the error.
func TestFailsClosed(t *testing.T) {
	t.Parallel()
	checks := []gcos.GateCheck{{Object: "a:b"}, {Object: "a:c", Action: gcos.ActionRead}}
	ask := func(t *testing.T, c *client.Client, ctx context.Context) (client.Answer, client.BatchAnswer) {
		t.Helper()
		return c.Gate(ctx, "a:b", gcos.ActionWrite), c.GateBatch(ctx, checks)
	}
	blockedWith := func(t *testing.T, a client.Answer, b client.BatchAnswer, want string) {
		t.Helper()
		if a.Allowed() || a.Decision != gcos.GateBlock || a.Err == nil || !strings.Contains(a.Err.Error(), want) ||
			!strings.Contains(a.Reason, "fails closed") || a.Object != "a:b" {
			t.Errorf("single: %+v (err %v), want a block naming %q", a.GateAnswer, a.Err, want)
		}
		if b.AllAllowed() || b.Decision != gcos.GateBlock || b.Err == nil || !strings.Contains(b.Err.Error(), want) ||
			len(b.Decisions) != len(checks) || b.Blocked != len(checks) || b.Allowed != 0 {
			t.Errorf("batch: %+v (err %v), want every check blocked naming %q", b.GateBatchAnswer, b.Err, want)
		}
		for i, d := range b.Decisions {
			if d.Decision != gcos.GateBlock || d.Object != checks[i].Object || !strings.Contains(d.Reason, want) {
				t.Errorf("batch decision %d: %+v", i, d)
			}
		}
	}

	t.Run("the stand-in allows", func(t *testing.T) {
		// The stand-ins below are believed when they answer well: this one allows, so their blocks are the client's.
		srv, _ := fault(t, echo(gcos.GateAllow))
		a, b := ask(t, quick(t, srv.URL), context.Background())
		if !a.Allowed() || !b.AllAllowed() || b.Allowed != 2 {
			t.Fatalf("a well-formed allow: %+v / %+v (%v %v)", a, b, a.Err, b.Err)
		}
	})
	t.Run("down", func(t *testing.T) {
		srv, _ := fault(t, echo(gcos.GateAllow))
		srv.Close()
		a, b := ask(t, quick(t, srv.URL), context.Background())
		blockedWith(t, a, b, "connect")
	})
	t.Run("slow past the caller's deadline", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		srv, _ := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		a, b := ask(t, quick(t, srv.URL), ctx)
		blockedWith(t, a, b, "deadline")
	})
	t.Run("slow past the client's own timeout when the caller set none", func(t *testing.T) {
		release := make(chan struct{})
		defer close(release)
		srv, _ := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		a, b := ask(t, quick(t, srv.URL, client.WithTimeout(300*time.Millisecond)), context.Background())
		blockedWith(t, a, b, "deadline")
	})
	t.Run("5xx", func(t *testing.T) {
		srv, n := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"code":"internal","message":"boom"}}`))
		})
		a, b := ask(t, quick(t, srv.URL), context.Background())
		blockedWith(t, a, b, "500: boom")
		if got := n.Load(); got != 2 {
			t.Errorf("a 500 was asked %d times, want once per call (not retried)", got)
		}
	})
	t.Run("503 every time", func(t *testing.T) {
		srv, n := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		a, b := ask(t, quick(t, srv.URL, client.WithRetries(2)), context.Background())
		blockedWith(t, a, b, "503")
		if got := n.Load(); got != 6 {
			t.Errorf("asked %d times, want 3 per call (2 retries)", got)
		}
	})
	t.Run("503 then an answer", func(t *testing.T) {
		allow := echo(gcos.GateAllow)
		srv, n := fault(t, func(w http.ResponseWriter, r *http.Request, attempt int64) {
			if attempt%3 != 0 {
				w.WriteHeader(http.StatusBadGateway)
				return
			}
			allow(w, r, attempt)
		})
		a, b := ask(t, quick(t, srv.URL), context.Background())
		if !a.Allowed() || !b.AllAllowed() || n.Load() != 6 {
			t.Fatalf("retried to an answer: %+v %v / %+v %v after %d requests", a.GateAnswer, a.Err, b.GateBatchAnswer, b.Err, n.Load())
		}
	})
	t.Run("Retry-After longer than the deadline", func(t *testing.T) {
		srv, n := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		a, b := ask(t, quick(t, srv.URL), ctx)
		blockedWith(t, a, b, "503")
		if ctx.Err() != nil || n.Load() != 2 {
			t.Errorf("asked %d times (deadline passed: %v): a wait past the deadline is not waited", n.Load(), ctx.Err())
		}
	})
	for _, tc := range []struct {
		name, contentType, body, want string
	}{
		{"garbage", "application/json", `<html>oops</html>`, "not a gate decision"},
		{"truncated", "application/json", `{"object":"a:b","action":"write","decision":"al`, "not a gate decision"},
		{"not JSON", "text/html", `{"decision":"allow"}`, "content type"},
		{"an empty object", "application/json", `{}`, "not a gate decision"},
		{"an unknown decision", "application/json", `{"object":"a:b","action":"write","decision":"maybe","decisions":[]}`, "not a gate decision"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, _ := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
				w.Header().Set("Content-Type", tc.contentType)
				_, _ = w.Write([]byte(tc.body))
			})
			a, b := ask(t, quick(t, srv.URL), context.Background())
			blockedWith(t, a, b, tc.want)
		})
	}
	t.Run("an allow for another question", func(t *testing.T) {
		srv, _ := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			w.Header().Set("Content-Type", "application/json")
			if r.Method == http.MethodGet {
				_, _ = fmt.Fprint(w, `{"object":"a:other","action":"write","decision":"allow","reason":"x"}`)
				return
			}
			// The checks answered out of order.
			_ = json.NewEncoder(w).Encode(gcos.NewGateBatchAnswer([]gcos.GateAnswer{
				{Object: "a:c", Action: gcos.ActionRead, Decision: gcos.GateAllow}, {Object: "a:b", Action: gcos.ActionWrite, Decision: gcos.GateAllow}}))
		})
		a, b := ask(t, quick(t, srv.URL), context.Background())
		blockedWith(t, a, b, "the question was")
	})
	t.Run("a batch short of its checks", func(t *testing.T) {
		srv, _ := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(gcos.NewGateBatchAnswer([]gcos.GateAnswer{{Object: "a:b", Action: gcos.ActionWrite, Decision: gcos.GateAllow}}))
		})
		b := quick(t, srv.URL).GateBatch(context.Background(), checks)
		if b.AllAllowed() || b.Err == nil || !errors.Is(b.Err, client.ErrMalformed) || b.Blocked != 2 {
			t.Fatalf("%+v %v", b.GateBatchAnswer, b.Err)
		}
	})
	t.Run("a batch that says allow over a block", func(t *testing.T) {
		srv, _ := fault(t, func(w http.ResponseWriter, r *http.Request, _ int64) {
			w.Header().Set("Content-Type", "application/json")
			ans := gcos.NewGateBatchAnswer([]gcos.GateAnswer{{Object: "a:b", Action: gcos.ActionWrite, Decision: gcos.GateAllow},
				{Object: "a:c", Action: gcos.ActionRead, Decision: gcos.GateBlock}})
			ans.Decision, ans.Allowed, ans.Blocked = gcos.GateAllow, 2, 0
			_ = json.NewEncoder(w).Encode(ans)
		})
		b := quick(t, srv.URL).GateBatch(context.Background(), checks)
		if b.AllAllowed() || b.Err == nil || !errors.Is(b.Err, client.ErrMalformed) || b.Blocked != 2 {
			t.Fatalf("%+v %v", b.GateBatchAnswer, b.Err)
		}
	})
}

func TestNewRefusesABadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "127.0.0.1:8080", "ftp://host", "http://", "://"} {
		if _, err := client.New(u); err == nil {
			t.Errorf("New(%q) accepted", u)
		}
	}
}
