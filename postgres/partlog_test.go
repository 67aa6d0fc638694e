package postgres_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

func maintainLog(ctx context.Context, pool *pgxpool.Pool, log postgres.Log, r postgres.LogRetention) (postgres.LogMaintained, error) {
	var res postgres.LogMaintained
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		res, err = postgres.MaintainLogTx(ctx, tx, log, r)
		return err
	})
	return res, err
}

func noteAged(t *testing.T, pool *pgxpool.Pool, key, age string) string {
	t.Helper()
	var xid string
	if err := pool.QueryRow(context.Background(), `INSERT INTO gcos_change_feed (kind, key, noted_at) VALUES ('group', $1, now() - $2::interval)
		RETURNING xid::text`, key, age).Scan(&xid); err != nil {
		t.Fatal(err)
	}
	return xid
}

func feedHorizon(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var h string
	if err := pool.QueryRow(context.Background(), `SELECT pruned_below::text FROM gcos_change_feed_horizon`).Scan(&h); err != nil {
		t.Fatal(err)
	}
	return h
}

// TestMaintainLog_DropsOnlyWritersBelowTheMark: a maintenance that cannot have the log's lock defers; notes the
// default partition caught are moved into partitions of their own; a partition past retention is dropped only once every transaction that wrote it lies below the mark,
// and the horizon moves just past the newest transaction dropped, never further.
func TestMaintainLog_DropsOnlyWritersBelowTheMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	hour := postgres.LogRetention{Width: time.Hour, Keep: time.Hour}
	var parts []gcos.Span
	maintain := func(mark string) postgres.LogMaintained {
		t.Helper()
		r := hour
		r.Mark = mark
		res, err := maintainLog(ctx, pool, postgres.ChangeFeedLog, r)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	older := noteAged(t, pool, "older", "3 hours")
	newer := noteAged(t, pool, "newer", "2 hours")
	// A writer holding the log: the maintenance gives up on its lock, changes nothing and fails nothing.
	writer, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Exec(ctx, `INSERT INTO gcos_change_feed (kind, key) VALUES ('group', 'in flight')`); err != nil {
		t.Fatal(err)
	}
	if res := maintain("0"); !res.Deferred || res.Created != 0 {
		t.Fatalf("a maintenance while a writer holds the log: %+v; want it deferred, nothing made", res)
	}
	if err := writer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if res := maintain("0"); res.Deferred || res.Created != 5 || res.Moved != 2 || res.Dropped != 0 {
		t.Fatalf("first maintenance: %+v; want now's partition, 2 ahead and one for each note, both notes moved, nothing dropped", res)
	}
	parts, err = postgres.LogPartitions(ctx, pool, postgres.ChangeFeedLog)
	if err != nil {
		t.Fatal(err)
	}
	var dbNow time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	for i, p := range parts {
		if p.To.Sub(p.From) != time.Hour || (i > 0 && p.From.Before(parts[i-1].To)) {
			t.Fatalf("partitions %v: not one hour each, in order, apart", parts)
		}
	}
	if last := parts[len(parts)-1]; last.To.Sub(dbNow) < 2*time.Hour {
		t.Fatalf("the partitions end at %v, less than two widths past now (%v)", last.To, dbNow)
	}
	if res := maintain("0"); res.Created != 0 || res.Dropped != 0 {
		t.Fatalf("a maintenance with nothing to do: %+v", res)
	}
	if res := maintain(newer); res.Dropped != 1 {
		t.Fatalf("mark at the newer note's writer: %+v; want only the older note's partition dropped", res)
	}
	var want string
	if err := pool.QueryRow(ctx, `SELECT ($1::text::numeric + 1)::text`, older).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if got := feedHorizon(t, pool); got != want {
		t.Fatalf("horizon %s, want just past the older note's writer (%s)", got, want)
	}
	var keys []string
	rows, _ := pool.Query(ctx, `SELECT key FROM gcos_change_feed`)
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) != 1 || keys[0] != "newer" {
		t.Fatalf("the feed holds %v (%v), want the newer note alone", keys, err)
	}
	wait.For(t, time.Minute, "every transaction up to the newer note's has ended", func() bool {
		var past bool
		err := pool.QueryRow(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot()) > $1::xid8`, newer).Scan(&past)
		return err == nil && past
	})
	if res := maintain(""); res.Dropped != 1 {
		t.Fatalf("mark at the oldest running transaction: %+v; want the newer note's partition dropped", res)
	}
	if err := pool.QueryRow(ctx, `SELECT ($1::text::numeric + 1)::text`, newer).Scan(&want); err != nil {
		t.Fatal(err)
	}
	if got := feedHorizon(t, pool); got != want {
		t.Fatalf("horizon %s, want just past the newer note's writer (%s)", got, want)
	}
}

// TestMaintainLog_UnderWritersAndReadersLosesNothing: writers note rows at times spread over five hours (some in no
// partition yet), readers read the feed as the gate's view does, and two maintainers make and drop partitions all
// the while. No writer, reader or maintenance fails (one may defer, giving up on the log's lock), and afterwards every row
// younger than retention, and every row of a transaction at or above the horizon, is there; the default partition is
// empty after a last maintenance.
func TestMaintainLog_UnderWritersAndReadersLosesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	r := postgres.LogRetention{Width: 15 * time.Minute, Keep: 2 * time.Hour}
	type note struct {
		key   string
		xid   string
		young bool // younger than retention when written
	}
	var (
		mu       sync.Mutex
		notes    []note
		stop     atomic.Bool
		wg       sync.WaitGroup
		failures = make(chan error, 100)
		gaveUp   atomic.Int64
		dropped  atomic.Int64
	)
	fail := func(err error) {
		select {
		case failures <- err:
		default:
		}
	}
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				age := time.Duration(rng.Int64N(int64(5*time.Hour))) - time.Hour // from an hour ahead to four behind
				var xid string
				if err := pool.QueryRow(ctx, `INSERT INTO gcos_change_feed (kind, key, noted_at) VALUES ('group', $1, now() - $2::interval)
					RETURNING xid::text`, key, age).Scan(&xid); err != nil {
					fail(fmt.Errorf("writer: %w", err))
					return
				}
				mu.Lock()
				notes = append(notes, note{key, xid, age < r.Keep-time.Minute})
				mu.Unlock()
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				_, err := pool.Exec(ctx, `SELECT DISTINCT kind, key FROM gcos_change_feed WHERE xid >= pg_snapshot_xmin(pg_current_snapshot())`)
				if err != nil {
					fail(fmt.Errorf("reader: %w", err))
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				res, err := maintainLog(ctx, pool, postgres.ChangeFeedLog, r)
				if err != nil {
					fail(fmt.Errorf("maintainer: %w", err))
					return
				}
				if res.Deferred { // gave up on the log's lock: the next one tries again
					gaveUp.Add(1)
				}
				dropped.Add(int64(res.Dropped))
				wait.Pace(ctx, 10*time.Millisecond) // pacing the maintainers, not a timing assertion
			}
		})
	}
	wait.For(t, time.Minute, "the maintainers drop partitions under the writers", func() bool {
		mu.Lock()
		n := len(notes)
		mu.Unlock()
		return dropped.Load() >= 5 && n >= 2000
	})
	stop.Store(true)
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	if _, err := maintainLog(ctx, pool, postgres.ChangeFeedLog, postgres.LogRetention{Width: r.Width, Keep: r.Keep, Mark: "0"}); err != nil {
		t.Fatal(err)
	}
	var inDefault int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM gcos_change_feed_default`).Scan(&inDefault); err != nil || inDefault != 0 {
		t.Fatalf("the default partition holds %d rows after a last maintenance (%v)", inDefault, err)
	}
	rows, _ := pool.Query(ctx, `SELECT key FROM gcos_change_feed`)
	kept, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	present := map[string]bool{}
	for _, k := range kept {
		present[k] = true
	}
	horizon := feedHorizon(t, pool)
	lost := 0
	for _, n := range notes {
		var above bool
		if err := pool.QueryRow(ctx, `SELECT $1::xid8 >= $2::xid8`, n.xid, horizon).Scan(&above); err != nil {
			t.Fatal(err)
		}
		if (n.young || above) && !present[n.key] {
			lost++
			if lost <= 5 {
				t.Errorf("note %s (xid %s, young %v) is gone; horizon %s", n.key, n.xid, n.young, horizon)
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d notes lost", lost, len(notes))
	}
	t.Logf("%d notes, %d kept, %d partitions dropped, %d maintenances gave up on a lock; horizon %s", len(notes), len(kept), dropped.Load(), gaveUp.Load(), horizon)
}
