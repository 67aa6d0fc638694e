package intake

// The births tail reads ahead while it catches up (issue 64: intake at the floor).
//
// A poll is serial: it reads its page, then the apply step maps it and writes the marks, counts and signals, then it
// commits. While a full page is applied, PostgreSQL and the process take turns on one core and the other idles. So
// once a births page comes back full, the poll starts reading the next page on a connection of its own, and the poll
// after it takes that page instead of reading one, if the cursor it locks is where the page starts. A page read
// ahead holds intake.catch_up_page_size rows (a catch-up page): the tail is behind while its pages come back full, and
// a larger page hands the backlog off with less of the per-group work a page does.
//
// Why that page is as complete as one the poll would read itself: a page is every row in (cursor, horizon), up to the
// page size, read after (1) the horizon was taken: no open transaction it did not pass over can still commit a row
// below it; (2) then no prepared transaction was found (one has left pg_stat_activity but may still commit); (3) then
// the read's snapshot was taken. The poll's own read takes these steps in this order in its transaction; the
// read-ahead takes them in the same order in its own (readAhead), so its page holds exactly what a poll reading at
// that moment from that position would hold. The poll checks, under the cursor's lock, that the cursor is at the
// page's start (a poll of another worker, a reset or a rolled-back apply in between drop the page), and records the
// page's horizon on the cursor, not its own.
//
// The read-ahead's horizon passes over the transaction applying the page before (it writes no birth, as a scan
// transaction does not), or the page would end where that transaction began. It runs for a births source only: the
// apply step of a change-ledger page writes rows of the ledger (the batch's audit row).

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// readAhead is one page read ahead for a source, from a position, under the configuration it was read with.
type readAhead struct {
	src   postgres.TailSource
	from  tailPos
	noTZ  bool
	zone  string
	page  int
	guard time.Duration
	roles []string

	cancel  context.CancelFunc
	reading atomic.Bool   // it holds a connection: its read ends without waiting on anything the poll holds
	done    chan struct{} // closed once rows, horizon, plan and err are set
	rows    []postgres.TailRow
	horizon horizonRead
	plan    *birthPlan // the page's births planned (planBirths), or nil
	err     error
}

// errPrepared stops a read-ahead that found a prepared transaction: the next poll reads its page itself (or stalls on
// the transaction, and says so, if it is still prepared).
var errPrepared = errors.New("a prepared transaction is open")

// startReadAhead starts reading src's page after from, on a connection of its own, passing over the transaction
// self (the poll applying the page that ends at from). A read-ahead of src not yet taken is replaced.
func (s *Stage) startReadAhead(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig, cur tailCursorRow,
	from tailPos, page int, self postgres.ScanTx) {
	ra := &readAhead{src: src, from: from, noTZ: cur.noTZ, zone: cur.zone, page: page, guard: cfg.HorizonGuard.Duration(),
		roles: slices.Clone(cfg.RoleFilter), done: make(chan struct{})}
	ctx, ra.cancel = context.WithCancel(ctx)
	s.aheads.Store(src.Name, ra)
	skip := append(s.writesNone(src), self)
	go func() {
		defer close(ra.done)
		defer ra.cancel()
		if s.readAheadHook != nil {
			s.readAheadHook()
		}
		ra.rows, ra.horizon, ra.plan, ra.err = s.readAhead(ctx, ra, cfg, skip)
	}()
}

// readAhead takes a poll's three steps (the horizon, no prepared transaction, the page) in one read-only transaction,
// then, once the transaction has ended, plans the page's births with the registries the last apply loaded, unless a
// birth is an inherited child (its anchor is looked up in the apply's transaction).
func (s *Stage) readAhead(ctx context.Context, ra *readAhead, cfg gcos.IntakeConfig, skip []postgres.ScanTx) ([]postgres.TailRow, horizonRead, *birthPlan, error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadOnly})
	if err != nil {
		return nil, horizonRead{}, nil, err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	ra.reading.Store(true)
	h, err := readHorizon(ctx, tx, cfg, skip)
	switch {
	case err != nil:
		return nil, h, nil, err
	case h.inRecovery || !h.seesAll:
		return nil, h, nil, errors.New("the horizon cannot be read here") // the poll refuses, and says why
	}
	var prepared int64
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()`).Scan(&prepared); err != nil {
		return nil, h, nil, err
	}
	if prepared > 0 {
		return nil, h, nil, errPrepared
	}
	rows, err := readPage(ctx, tx, ra.src, ra.noTZ, ra.zone, ra.from, h.at, ra.page)
	if err != nil {
		return nil, h, nil, err
	}
	_ = tx.Rollback(ctx)
	rset := s.freshRegistries() // the apply plans with the registries it loads, if they are not these
	if rset == nil {
		return rows, h, nil, nil
	}
	births := make([]*postgres.TailRow, 0, len(rows))
	for i := range rows {
		r := &rows[i]
		if r.ParentCode != "" {
			return rows, h, nil, nil
		}
		if birthInvalid(r) == nil {
			births = append(births, r)
		}
	}
	if len(births) == 0 {
		return rows, h, nil, nil
	}
	return rows, h, s.planBirths(rset, births, nil), nil
}

// takeReadAhead returns src's page read ahead, and the horizon it was read below, when it was read from the
// cursor's position under the poll's configuration; ok is false when there is none to take (the poll reads its
// page itself). The read-ahead is dropped either way. The poll waits for a read-ahead only once it is reading: one
// still waiting for a connection of the pool (which the poll's own transaction may be holding) is called off.
func (s *Stage) takeReadAhead(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig, cur tailCursorRow,
	page int) (rows []postgres.TailRow, h horizonRead, plan *birthPlan, ok bool) {
	v, found := s.aheads.LoadAndDelete(src.Name)
	if !found {
		return nil, h, nil, false
	}
	ra := v.(*readAhead)
	if !ra.reading.Load() {
		// It waits for a connection (or its hook): the poll reads its page itself rather than wait for one.
		ra.cancel()
	}
	select {
	case <-ra.done:
	case <-ctx.Done():
		ra.cancel()
		return nil, h, nil, false
	}
	if ra.err != nil || !ra.fits(src, cfg, cur, page) {
		return nil, h, nil, false
	}
	return ra.rows, ra.horizon, ra.plan, true
}

// fits says whether the page was read from the cursor's position, of the same source, in the same zone, with the
// same page size, guard and role filter as the poll would read it.
func (ra *readAhead) fits(src postgres.TailSource, cfg gcos.IntakeConfig, cur tailCursorRow, page int) bool {
	return ra.from.start == cur.pos.start && ra.from.ts.Equal(cur.pos.ts) && ra.from.id == cur.pos.id &&
		ra.noTZ == cur.noTZ && ra.zone == cur.zone && ra.page == page && ra.guard == cfg.HorizonGuard.Duration() &&
		slices.Equal(ra.roles, cfg.RoleFilter) && reflect.DeepEqual(ra.src, src)
}

// readPage reads the keyset page of src after from, below horizon.
func readPage(ctx context.Context, q postgres.Querier, src postgres.TailSource, noTZ bool, zone string, from tailPos,
	horizon time.Time, page int) ([]postgres.TailRow, error) {
	args := []any{from.tsArg(noTZ), from.idArg(), horizon, page}
	if noTZ {
		args = append(args, zone)
	}
	return tailReadRows(ctx, q, src, noTZ, page, readSQL(src, noTZ), args...)
}
