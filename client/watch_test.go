package client_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"testing"
	"time"

	"gcos/client"
	"gcos/gcostest/wait"
)

// TestWatchResumesAcrossDroppedStreams: Watch delivers every change committed after it began, once and in commit
// order, although the server drops every connection twice along the way (the client resumes after the last change
// it delivered); a cursor the server never issued ends the watch with the server's 400; GateAtLeast answers from a
// state that covers the token it was given.
func TestWatchResumesAcrossDroppedStreams(t *testing.T) {
	t.Parallel()
	w, srv := served(t, 300, 5)
	c := quick(t, srv.URL)
	ctx, cancel := context.WithTimeout(w.Ctx, 2*time.Minute)
	defer cancel()

	// Where to watch from: the cursor of a read of the log (from now, the watch would begin when it connects).
	var latest struct{ Next string }
	if err := c.Get(ctx, "/v1/changes", url.Values{"limit": {"1"}}, &latest); err != nil || latest.Next == "" {
		t.Fatalf("GET /v1/changes: %+v %v", latest, err)
	}
	var mu sync.Mutex
	var got []string
	watchCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- c.Watch(watchCtx, latest.Next, func(ch client.Change) error {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, ch.Key)
			return nil
		})
	}()
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(got)
	}
	insert := func(key string) {
		w.Exec(t, `INSERT INTO gcos_verdict_change (subject, key, group_key, ruleset_version, verdict_before, verdict_after, why, run_id)
			VALUES ('group', $1, $1, 'watch-test', 'unknown', 'relevant', 'input', 'watch-test')`, key)
	}
	insert("first")
	wait.For(t, time.Minute, "the first change is watched", func() bool { return received() == 1 })
	const n = 30
	for i := range n {
		insert(fmt.Sprintf("change-%02d", i))
		if i == n/3 || i == 2*n/3 {
			srv.CloseClientConnections() // the stream drops
		}
	}
	wait.For(t, time.Minute, "every change is watched", func() bool { return received() >= n+1 })
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Watch: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != n+1 {
		t.Fatalf("watched %d changes, want %d: %v", len(got), n+1, got)
	}
	for i := range n {
		if want := fmt.Sprintf("change-%02d", i); got[i+1] != want {
			t.Fatalf("change %d is %s, want %s (commit order): %v", i, got[i+1], want, got)
		}
	}

	// A cursor the server never issued: the watch ends with the server's refusal.
	err := c.Watch(ctx, "not-a-cursor", func(client.Change) error { return nil })
	var se *client.ServerError
	if !errors.As(err, &se) || se.Status != http.StatusBadRequest {
		t.Fatalf("Watch from a bad cursor: %v, want a 400", err)
	}

	// The writer's pattern: commit, token, gate at least as fresh.
	token, err := c.Token(ctx)
	if err != nil || token == "" {
		t.Fatalf("Token: %q %v", token, err)
	}
	obj := w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 1`)[0]
	if a := c.GateAtLeast(ctx, token, obj, "write"); a.Err != nil || a.Token == "" {
		t.Fatalf("GateAtLeast: %+v", a)
	}
}
