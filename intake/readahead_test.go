package intake_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/gcostest/wait"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// readAheadPolls polls the births tail until a page is not full, and returns each poll's result. Before each poll it
// lets the read-ahead the last one started finish reading: a poll calls off one that has no connection yet.
func (e *tailEnv) readAheadPolls(t *testing.T) []intake.PollResult {
	t.Helper()
	var out []intake.PollResult
	for range 1_000 {
		intake.WaitReadAhead(e.stage, e.birth.Name)
		res := e.poll(t, e.birth, tailRecord)
		out = append(out, res)
		if !res.PageFull {
			return out
		}
	}
	t.Fatal("the tail never caught up")
	return nil
}

// holdReadAheads holds every read-ahead of e's stage back, before it takes a connection, until release is called.
func holdReadAheads(t *testing.T, e *tailEnv) (release func()) {
	t.Helper()
	hold := make(chan struct{})
	release = sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release) // a failing test never leaves a read-ahead waiting
	intake.SetReadAheadHook(e.stage, func() { <-hold })
	return release
}

// TestTailReadAhead_TakesTheNextPageOnce: while a full births page is applied the next one is read, and the next poll
// hands it off: every row exactly once, in pages of the configured size (intake.page_size, then
// intake.catch_up_page_size for each page read ahead); with intake.read_ahead off, no poll does, and every page is
// of intake.page_size.
func TestTailReadAhead_TakesTheNextPageOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		readAhead bool
		catchUp   int
		reads     string
		ahead     int
	}{
		{true, 0, "[100 100 100 50]", 3},
		{false, 0, "[100 100 100 50]", 0},
		{true, 150, "[100 150 100]", 2}, // the last page read ahead is not full: the tail has caught up
		{false, 150, "[100 100 100 50]", 0},
		{true, 400, "[100 250]", 1},
	} {
		t.Run(fmt.Sprintf("read_ahead=%v,catch_up=%d", tc.readAhead, tc.catchUp), func(t *testing.T) {
			t.Parallel()
			e := newTailEnv(t)
			e.cfg.ReadAhead, e.cfg.CatchUpPageSize = tc.readAhead, tc.catchUp
			ids := e.births(t, 350)
			wait.Pass(e.ctx, 2*tailGuard)
			polls := e.readAheadPolls(t)
			var reads []int
			ahead := 0
			for _, p := range polls {
				reads = append(reads, p.Read)
				if p.ReadAhead {
					ahead++
				}
			}
			if fmt.Sprint(reads) != tc.reads {
				t.Fatalf("pages read %v, want %s", reads, tc.reads)
			}
			if ahead != tc.ahead || polls[0].ReadAhead {
				t.Fatalf("%d of the polls took a page read ahead, want %d (never the first)", ahead, tc.ahead)
			}
			tailExactlyOnce(t, "read-ahead", ids, e.applied(t, e.birth.Name))
		})
	}
}

// TestTailReadAhead_AnOpenWriterHoldsItBack: a writer's transaction open while the next page is read ahead bounds
// that page's horizon as it bounds a poll's: the rows committed after it began wait, and its own row, which sorts
// before them, is handed off once it commits.
func TestTailReadAhead_AnOpenWriterHoldsItBack(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	before := e.births(t, 250)
	wait.Pass(e.ctx, 2*tailGuard)
	w := tailBegin(t, e.session(t))
	wID, err := tailInsertBirth(e.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	after := e.births(t, 150)
	wait.Pass(e.ctx, 2*tailGuard)
	polls := e.readAheadPolls(t)
	last := polls[len(polls)-1]
	if len(polls) != 3 || !last.ReadAhead || last.Read != 50 || last.HeldBy == nil {
		t.Fatalf("while the writer is open the polls should read the 250 rows before it, the last two pages read "+
			"ahead, the last held by the writer: %+v", polls)
	}
	tailExactlyOnce(t, "while the writer is open", before, e.applied(t, e.birth.Name))
	if err := w.Commit(e.ctx); err != nil {
		t.Fatal(err)
	}
	e.drain(t, e.birth, tailRecord)
	tailExactlyOnce(t, "after it committed", append(append(before, wID), after...), e.applied(t, e.birth.Name))
}

// TestTailReadAhead_PassesOverTheApplyingPoll: the poll applying a page writes no birth, so the read-ahead's horizon
// passes over its transaction: rows committed after that poll began are in the next page, not held for a page more.
func TestTailReadAhead_PassesOverTheApplyingPoll(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	before := e.births(t, 150)
	wait.Pass(e.ctx, 2*tailGuard)
	release := holdReadAheads(t, e)
	var during []int64
	slowApply := func(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]intake.RowFailure, error) {
		if len(during) == 0 { // the first page: rows commit while it is applied, then the read-ahead reads
			during = e.births(t, 10)
			wait.Pass(ctx, 2*tailGuard)
			release()
			intake.WaitReadAhead(e.stage, e.birth.Name)
		}
		return tailRecord(ctx, tx, rows)
	}
	if res := e.poll(t, e.birth, slowApply); !res.PageFull {
		t.Fatalf("the first page should be full: %+v", res)
	}
	if res := e.poll(t, e.birth, tailRecord); !res.ReadAhead || res.Read != 60 {
		t.Fatalf("the page read ahead should hold the 50 rows left and the 10 committed while the first was applied: %+v", res)
	}
	tailExactlyOnce(t, "passes over", append(before, during...), e.applied(t, e.birth.Name))
}

// TestTailReadAhead_OneConnection: the read-ahead needs a connection of its own, which the poll's transaction may be
// holding. On a pool of one the tail still drains, every row once: a poll never waits for a read-ahead that has no
// connection yet (it reads its page itself), and one that has one never waits on the poll.
func TestTailReadAhead_OneConnection(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	cfg, err := pgxpool.ParseConfig(pgtest.DSN(e.pool))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(e.ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	stage := intake.New(postgres.New(one, gcos.DefaultConfig(), nil))
	ids := e.births(t, 1_050)
	wait.Pass(e.ctx, 2*tailGuard)
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	for polls := 0; ; polls++ {
		res, err := stage.PollTail(ctx, e.birth, e.cfg, tailRecord)
		if err != nil {
			t.Fatalf("poll %d on a pool of one connection: %v", polls+1, err)
		}
		if !res.PageFull {
			break
		}
	}
	tailExactlyOnce(t, "one connection", ids, e.applied(t, e.birth.Name))
}

// TestTailReadAhead_DroppedWhenTheCursorMoved: a page read ahead from where the cursor no longer is (a reset, another
// worker, a rolled-back apply) is never handed off: the poll reads from the cursor.
func TestTailReadAhead_DroppedWhenTheCursorMoved(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	ids := e.births(t, 250)
	wait.Pass(e.ctx, 2*tailGuard)
	if res := e.poll(t, e.birth, tailRecord); !res.PageFull {
		t.Fatalf("the first page should be full: %+v", res)
	}
	if _, err := intake.New(e.store).ResetCursor(e.ctx, e.birth.Name, "start"); err != nil {
		t.Fatal(err)
	}
	polls := e.readAheadPolls(t)
	if polls[0].ReadAhead {
		t.Fatalf("the page read ahead from row 100 was handed off after the cursor was reset to the start: %+v", polls[0])
	}
	got := e.applied(t, e.birth.Name)
	for i, id := range ids {
		if want := map[bool]int{true: 2, false: 1}[i < 100]; got[id] != want {
			t.Fatalf("row %d (the %dth) applied %d times, want %d: the reset replays the first page once", id, i+1, got[id], want)
		}
	}
}

// TestTailReadAhead_PreparedTransactionDropsIt: a transaction prepared while the next page is read ahead has left
// pg_stat_activity, so it holds no horizon, yet it may commit a row that sorts before rows the read-ahead sees. When
// it commits before the next poll, the poll finds no prepared transaction to stall on; the read-ahead found it, gave
// up, and the poll reads its page itself, the committed row with it. (Had the read-ahead not looked, its page would
// carry the cursor past that row.)
func TestTailReadAhead_PreparedTransactionDropsIt(t *testing.T) {
	t.Parallel()
	e := newTailEnv(t)
	var maxPrepared int
	if err := e.pool.QueryRow(e.ctx, `SELECT current_setting('max_prepared_transactions')::int`).Scan(&maxPrepared); err != nil {
		t.Fatal(err)
	}
	if maxPrepared == 0 {
		t.Skip("max_prepared_transactions = 0 on this server (the throwaway test cluster allows them)")
	}
	release := holdReadAheads(t, e)
	before := e.births(t, 150)
	wait.Pass(e.ctx, 2*tailGuard)
	if res := e.poll(t, e.birth, tailRecord); !res.PageFull {
		t.Fatalf("the first page should be full: %+v", res)
	}
	// The read-ahead of rows 101.. waits. A writer begins, inserts, and prepares; later rows commit after it began.
	w := tailBegin(t, e.session(t))
	wID, err := tailInsertBirth(e.ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	gid := fmt.Sprintf("gcos-read-ahead-%d", wID)
	if _, err := w.Exec(e.ctx, `PREPARE TRANSACTION '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	resolved := false
	t.Cleanup(func() {
		if !resolved {
			_, _ = e.pool.Exec(e.ctx, `ROLLBACK PREPARED '`+gid+`'`)
		}
	})
	after := e.births(t, 5)
	wait.Pass(e.ctx, 2*tailGuard)
	release()
	intake.WaitReadAhead(e.stage, e.birth.Name) // it has looked while the transaction was prepared
	if _, err := e.pool.Exec(e.ctx, `COMMIT PREPARED '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	resolved = true
	polls := e.readAheadPolls(t)
	if polls[0].ReadAhead {
		t.Fatalf("the page read ahead while a transaction was prepared was handed off: %+v", polls[0])
	}
	tailExactlyOnce(t, "prepared", append(append(before, wID), after...), e.applied(t, e.birth.Name))
}
