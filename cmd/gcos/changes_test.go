package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"testing"
	"time"

	"gcos/gcostest"
	"gcos/postgres/pgtest"
)

// TestChangesFollow: `gcos changes --follow --json --after <next of an earlier answer>` on the database prints
// every change committed after that answer, one JSON line each in commit order with the cursor just past it, until
// interrupted (exit 0).
func TestChangesFollow(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 300, Seed: 3})
	ctx, cancel := context.WithTimeout(w.Ctx, 2*time.Minute)
	defer cancel()
	dsn := pgtest.DSN(w.Pool)
	code, stdout, stderr := runGate(t, "--database-url", dsn, "--data-dir", t.TempDir(), "--json", "changes", "--limit", "1")
	var first struct{ Next string }
	if err := json.Unmarshal([]byte(stdout), &first); code != 0 || err != nil || first.Next == "" {
		t.Fatalf("gcos changes --json: exit %d, %v\n%s%s", code, err, stdout, stderr)
	}
	const n = 12
	for i := range n {
		w.Exec(t, `INSERT INTO gcos_verdict_change (subject, key, group_key, ruleset_version, verdict_before, verdict_after, why, run_id)
			VALUES ('group', $1, $1, 'follow-test', 'unknown', 'relevant', 'input', 'follow-test')`, fmt.Sprintf("follow-%02d", i))
	}
	r, wr := io.Pipe()
	done := make(chan int, 1)
	args := []string{"--database-url", dsn, "--data-dir", t.TempDir(), "--json", "changes", "--follow", "--after", first.Next}
	go func() {
		done <- newApp(wr, io.Discard).execute(ctx, args)
		_ = wr.Close()
	}()
	lines := bufio.NewScanner(r)
	var got []string
	for len(got) < n && lines.Scan() {
		var line struct {
			Change struct{ Key string } `json:"change"`
			Cursor string               `json:"cursor"`
		}
		if err := json.Unmarshal(lines.Bytes(), &line); err != nil || line.Cursor == "" {
			t.Fatalf("not a change line: %q (%v)", lines.Text(), err)
		}
		got = append(got, line.Change.Key)
	}
	cancel()
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if code := <-done; code != 0 {
		t.Fatalf("gcos changes --follow: exit %d after an interrupt, want 0", code)
	}
	for i, k := range got {
		if want := fmt.Sprintf("follow-%02d", i); k != want {
			t.Fatalf("change %d is %s, want %s (commit order): %v", i, k, want, got)
		}
	}
	if len(got) != n {
		t.Fatalf("followed %d changes, want %d", len(got), n)
	}
}
