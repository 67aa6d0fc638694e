package httpapi_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"gcos"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/postgres"
)

// feedTx is one writing transaction of TestChangeFeedFollowsCommits: its changes, the commits that had returned
// when it began, and its own place in the commit order once it committed.
type feedTx struct {
	keys      []string
	seenAtBeg int64 // commits returned before it began
	commit    int64 // 1-based place in the commit order
}

// TestChangeFeedFollowsCommits (SPEC §13 feed): writers commit verdict changes from concurrent transactions whose
// commits come out of the order their ids were given, while one reader follows GET /v1/changes?after= with a small
// page and another follows GET /v1/changes/watch, dropping the stream midway and resuming with Last-Event-ID. Each
// receives every change exactly once, and a change whose transaction began after another's commit had returned
// comes after that other's changes (commit order).
func TestChangeFeedFollowsCommits(t *testing.T) {
	t.Parallel()
	w := gcostest.New(t, gcostest.Options{Births: 200, Seed: 3})
	e := &env{w: w, ctx: w.Ctx, pool: w.Pool, store: w.Store}
	e.ruleset = w.Backfill(t).RulesetVersion
	e.serve(t, gcos.HTTPConfig{Listen: "127.0.0.1:0", ReaderTokens: []string{readerToken}, OperatorTokens: []string{operatorToken},
		WatchPoll: gcos.Duration(10 * time.Millisecond), WatchHeartbeat: gcos.Duration(50 * time.Millisecond)})
	var from postgres.ChangePage
	if a := e.get(t, "/v1/changes?after=now"); a.status != http.StatusOK {
		t.Fatalf("GET /v1/changes?after=now: %d %s", a.status, a.body)
	} else {
		a.json(t, &from)
	}

	// The writers: each transaction takes its id with its first change, pauses, writes more, and commits, so that
	// transactions begun later often commit first.
	const writers, txPerWriter = 4, 20
	var commits atomic.Int64
	var mu sync.Mutex
	var txs []*feedTx
	byKey := map[string]*feedTx{}
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Minute)
	defer cancel()
	write := errgroup.Group{}
	for g := range writers {
		write.Go(func() error {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for n := range txPerWriter {
				tx := &feedTx{seenAtBeg: commits.Load()}
				err := pgx.BeginFunc(ctx, e.pool, func(db pgx.Tx) error {
					for j := range 1 + r.IntN(3) {
						key := fmt.Sprintf("feed-%d-%d-%d", g, n, j)
						if _, err := db.Exec(ctx, `INSERT INTO gcos_verdict_change (subject, key, group_key, ruleset_version,
							verdict_before, verdict_after, why, run_id, changed_at) VALUES ('group', $1, $1, 'feed-test', 'unknown', 'relevant',
							'input', 'feed-test', clock_timestamp())`, key); err != nil {
							return err
						}
						tx.keys = append(tx.keys, key)
						wait.Pace(ctx, time.Duration(r.IntN(4))*time.Millisecond) // hold the transaction open a moment: others commit past it
					}
					return nil
				})
				if err != nil {
					return err
				}
				mu.Lock()
				tx.commit = commits.Add(1)
				txs = append(txs, tx)
				for _, k := range tx.keys {
					byKey[k] = tx
				}
				mu.Unlock()
			}
			return nil
		})
	}

	// The readers run while the writers write, until they have read as many changes as were committed.
	var polled, streamed []string
	var total atomic.Int64
	total.Store(-1) // not known until the writers are done
	read := errgroup.Group{}
	read.Go(func() error {
		var err error
		polled, err = followPages(ctx, e, from.Next, &total)
		return err
	})
	read.Go(func() error {
		var err error
		streamed, err = followStream(ctx, e, from.Next, &total)
		return err
	})
	if err := write.Wait(); err != nil {
		t.Fatalf("writers: %v", err)
	}
	n := 0
	for _, tx := range txs {
		n += len(tx.keys)
	}
	total.Store(int64(n))
	if err := read.Wait(); err != nil {
		t.Fatalf("readers: %v", err)
	}
	for name, got := range map[string][]string{"paged": polled, "streamed": streamed} {
		seen := map[string]int{}
		for i, k := range got {
			if _, dup := seen[k]; dup {
				t.Errorf("%s: %s received twice", name, k)
			}
			seen[k] = i
		}
		if len(seen) != n {
			t.Errorf("%s: %d distinct changes received, %d committed", name, len(seen), n)
		}
		for k := range byKey {
			if _, ok := seen[k]; !ok {
				t.Errorf("%s: %s never received", name, k)
			}
		}
		// Commit order: a transaction begun after another's commit returned comes after all of that one's changes.
		for _, b := range txs {
			for _, a := range txs {
				if a.commit > b.seenAtBeg {
					continue // a had not committed (as far as anyone could tell) when b began
				}
				for _, ka := range a.keys {
					for _, kb := range b.keys {
						if seen[ka] > seen[kb] {
							t.Errorf("%s: %s (commit %d) came after %s (begun after commit %d)", name, ka, a.commit, kb, b.seenAtBeg)
						}
					}
				}
			}
		}
	}
	t.Logf("%d changes in %d transactions: paged %d, streamed %d", n, len(txs), len(polled), len(streamed))
}

// caughtUp reports whether a reader holding got changes has them all (total, once the writers are done).
func caughtUp(got int, total *atomic.Int64) bool {
	n := total.Load()
	return n >= 0 && int64(got) >= n
}

// followPages follows GET /v1/changes?after= with pages of 7 until it has every change, then reads once more: a
// change after them would be one too many.
func followPages(ctx context.Context, e *env, cursor string, total *atomic.Int64) ([]string, error) {
	var keys []string
	for {
		var page postgres.ChangePage
		if err := getJSON(ctx, e, "/v1/changes?limit=7&after="+url.QueryEscape(cursor), &page); err != nil {
			return keys, err
		}
		for _, c := range page.Changes {
			keys = append(keys, c.Key)
		}
		cursor = page.Next
		if page.More {
			continue
		}
		if caughtUp(len(keys), total) {
			var extra postgres.ChangePage
			if err := getJSON(ctx, e, "/v1/changes?after="+url.QueryEscape(cursor), &extra); err != nil {
				return keys, err
			}
			for _, c := range extra.Changes {
				keys = append(keys, c.Key)
			}
			return keys, nil
		}
		wait.Pace(ctx, 2*time.Millisecond)
		if ctx.Err() != nil {
			return keys, ctx.Err()
		}
	}
}

// followStream follows GET /v1/changes/watch, drops the stream after five events and resumes with Last-Event-ID,
// until it has every change.
func followStream(ctx context.Context, e *env, cursor string, total *atomic.Int64) ([]string, error) {
	var keys []string
	last := ""
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+"/v1/changes/watch?after="+url.QueryEscape(cursor), nil)
		if err != nil {
			return keys, err
		}
		req.Header.Set("Authorization", "Bearer "+readerToken)
		if last != "" {
			req.Header.Set("Last-Event-ID", last) // as an EventSource reconnects: the same URL, and the last id
		}
		resp, err := e.srv.Client().Do(req)
		if err != nil {
			return keys, err
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return keys, fmt.Errorf("watch: %d", resp.StatusCode)
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		var id, data string
		events := 0
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "id: "):
				id = strings.TrimPrefix(line, "id: ")
			case strings.HasPrefix(line, "data: "):
				data = strings.TrimPrefix(line, "data: ")
			case line == "" && data != "":
				var c postgres.VerdictChange
				if err := json.Unmarshal([]byte(data), &c); err != nil {
					resp.Body.Close()
					return keys, err
				}
				keys, last, data = append(keys, c.Key), id, ""
				events++
			}
			if attempt == 0 && events == 5 {
				break // dropped: the client resumes where it was
			}
			if caughtUp(len(keys), total) {
				resp.Body.Close()
				return keys, nil
			}
		}
		resp.Body.Close()
		if attempt > 0 {
			return keys, fmt.Errorf("watch ended after %d changes: %v", len(keys), sc.Err())
		}
	}
}

func getJSON(ctx context.Context, e *env, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", e.srv.URL+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+readerToken)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d", path, resp.StatusCode)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
