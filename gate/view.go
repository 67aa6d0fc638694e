package gate

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// The gate's in-process verdict view (SPEC §12 freshness). It holds what the gate judges an object on — the groups,
// their candidate rows, the object rows and the coverage records under the current ruleset, the rulesets' states,
// the snapshots and exceptions they reference, and the registries' names — loaded in one consistent read and kept
// current from the change feed (migration 014) that every write to those tables notes in its own transaction.
//
// The bound is enforced, not hoped for: each catch-up is a read of the database, and the view answers only while
// its last catch-up began at most gate.max_staleness ago (the monotonic clock). Every commit before that instant is
// in the view; a decision that cannot be answered within the bound reads through to the database (and blocks when
// that fails). It catches up every gate.view_refresh, by polling: nothing can be missed, and no writer pays for a
// notification (a notifying commit serializes with every other).
//
// Birth rows are the source's, not GCOS's: the view caches an object's birth (and its parent's) when first asked,
// and drops it when the intake hands off a change-ledger row naming it (a 'birth' note in the feed, written in the
// handoff's transaction) or when it is older than gate.view_birth_max_age, the bound on a source update that
// bypasses the change ledger.

// Gate answer sources.
const (
	SourceView     = "view"
	SourceDatabase = "database"
)

// VerdictView is the gate's in-process view; Run keeps it current. The zero value is not usable: see NewVerdictView.
type VerdictView struct {
	g            *Gate
	maxStale     time.Duration
	refresh      time.Duration
	birthMaxAge  time.Duration
	feedRetained time.Duration
	feedWidth    time.Duration // gate.feed_partition

	catchingUp sync.Mutex // one catch-up at a time
	mu         sync.RWMutex
	state      *viewState
	asOf       time.Time             // the local (monotonic) instant the last catch-up's read began: its snapshot is younger
	dbAsOf     time.Time             // the database clock at that read
	offset     time.Duration         // database clock minus local clock, measured at that read
	snapshot   string                // pg_current_snapshot() of that read: the next catch-up reads what committed since
	timeline   string                // the WAL timeline of that read: a failover starts a new one (see CatchUp)
	token      gcos.ConsistencyToken // the snapshot, parsed: what an at_least question is checked against

	objects     sync.Map // postgres.ObjectRef → *objectEntry: what the view remembers of an object asked about
	objectCount atomic.Int64
	maxObjects  int             // objects remembered; past it they are all forgotten
	birthGen    atomic.Uint64   // bumped whenever a catch-up drops births: a birth read across it is not cached
	samples     []horizonSample // (time, xmin) samples the feed is pruned by
	lastPrune   time.Time

	answered, readThrough, reloads atomic.Int64

	// conn is Run's own connection for catching up (nil: catch-ups borrow from the gate's pool). When the view
	// falls behind, every gate question reads through and crowds the gate's pool; the catch-up that ends it must
	// not queue behind them, or the view stays behind for as long as the load lasts.
	conn *pgx.Conn
}

// NewVerdictView builds a view for g over its database with its configuration (gate.max_staleness and friends).
func NewVerdictView(g *Gate) *VerdictView {
	c := g.cfg.Gate
	return &VerdictView{g: g, maxStale: c.MaxStaleness.Duration(), refresh: c.ViewRefresh.Duration(),
		birthMaxAge: c.ViewBirthMaxAge.Duration(), feedRetained: c.FeedRetention.Duration(), feedWidth: c.FeedPartition.Duration(),
		maxObjects: c.ViewObjects}
}

type horizonSample struct {
	at   time.Time
	xmin string
}

// ViewStats counts the view's answers and read-throughs.
type ViewStats struct {
	Answered    int64     `json:"answered"`
	ReadThrough int64     `json:"read_through"`
	Reloads     int64     `json:"reloads"`
	AsOf        time.Time `json:"as_of"`
	Fresh       bool      `json:"fresh"`
}

// Stats reports the view's counters and whether it may answer now.
func (v *VerdictView) Stats() ViewStats {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return ViewStats{Answered: v.answered.Load(), ReadThrough: v.readThrough.Load(), Reloads: v.reloads.Load(),
		AsOf: v.dbAsOf, Fresh: v.freshLocked()}
}

func (v *VerdictView) freshLocked() bool {
	return v.state != nil && time.Since(v.asOf) <= v.maxStale
}

// Run loads the view and keeps it current until ctx ends. A failed catch-up is logged and retried: meanwhile the
// view ages past its bound and the gate reads through.
func (v *VerdictView) Run(ctx context.Context) error {
	tick := time.NewTicker(v.refresh)
	defer tick.Stop()
	defer func() {
		v.catchingUp.Lock()
		defer v.catchingUp.Unlock()
		v.closeConn(ctx)
	}()
	var failing bool
	for {
		err := v.connect(ctx)
		if err == nil {
			err = v.CatchUp(ctx)
		}
		if ctx.Err() != nil {
			return nil
		}
		if err != nil && !failing {
			v.g.logger.Warn("gate view: catch up (the gate reads through until it recovers)", "err", err)
		} else if err == nil && failing {
			v.g.logger.Info("gate view: caught up again")
		}
		failing = err != nil
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// connect opens Run's own connection when it has none (a failed catch-up closes it).
func (v *VerdictView) connect(ctx context.Context) error {
	v.catchingUp.Lock()
	defer v.catchingUp.Unlock()
	if v.conn != nil {
		return nil
	}
	cfg := v.g.gatePool.Config().ConnConfig.Copy()
	cfg.RuntimeParams["application_name"] = "gcos-gate-view"
	ctx, cancel := context.WithTimeout(ctx, v.maxStale+v.g.cfg.Gate.Timeout.Duration())
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("gate view: connect: %w", err)
	}
	v.conn = conn
	return nil
}

// closeConn closes Run's own connection, if any, within a second (the server may be gone); under catchingUp.
func (v *VerdictView) closeConn(ctx context.Context) {
	if v.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	postgres.CloseConn(ctx, v.conn)
	v.conn = nil
}

// viewHeaderSQL opens a catch-up: its snapshot (what the next one starts from), the clock, and whether the feed
// was pruned past the previous snapshot (then notes may be gone and everything is reloaded).
// The timeline is the primary's WAL timeline (NULL on a standby, which the view never reads).
const viewHeaderSQL = `SELECT pg_current_snapshot()::text, pg_snapshot_xmin(pg_current_snapshot())::text, clock_timestamp(),
	coalesce($1::pg_snapshot IS NULL OR pg_snapshot_xmin($1::pg_snapshot) < (SELECT pruned_below FROM gcos_change_feed_horizon), true),
	CASE WHEN NOT pg_is_in_recovery() THEN substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8) END`

// viewFeedSQL: the notes of the transactions that committed since the previous snapshot.
const viewFeedSQL = `SELECT DISTINCT kind, key FROM gcos_change_feed
	WHERE xid >= pg_snapshot_xmin($1::pg_snapshot) AND NOT pg_visible_in_snapshot(xid, $1::pg_snapshot)`

// reloadAbove is how many changed keys a catch-up re-reads one by one; past it, it reloads everything.
const reloadAbove = 20_000

// CatchUp brings the view up to the database's present in one repeatable-read transaction.
func (v *VerdictView) CatchUp(ctx context.Context) error {
	v.catchingUp.Lock()
	defer v.catchingUp.Unlock()
	began := time.Now()
	v.mu.RLock()
	prev, cur, prevTimeline := v.snapshot, v.state, v.timeline
	v.mu.RUnlock()
	var prevArg *string
	if cur != nil {
		prevArg = &prev
	}
	var snapshot, xmin string
	var timeline *string
	var dbNow, read time.Time
	var reload bool
	var next *viewState
	var changed map[string][]string
	d := newViewDelta()
	var db interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	} = v.g.gatePool
	if v.conn != nil {
		db = v.conn
	}
	err := pgx.BeginTxFunc(ctx, db, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, viewHeaderSQL, prevArg).Scan(&snapshot, &xmin, &dbNow, &reload, &timeline); err != nil {
			return fmt.Errorf("open: %w", err)
		}
		read = time.Now()
		if timeline == nil {
			return errors.New("the server is a standby (in recovery): the view reads the primary only")
		}
		// A promoted replica starts a new timeline, and an asynchronous one may lack transactions the view already
		// reflects: its history went back, the feed's snapshots name transactions it never saw, so everything is read
		// again from it. Never state newer than the database.
		if prevTimeline != "" && *timeline != prevTimeline {
			v.g.logger.Warn("gate view: the database's history changed (a new timeline after a failover); reloading", "from", prevTimeline, "to", *timeline)
			reload = true
		}
		if !reload {
			var err error
			if changed, err = readFeed(ctx, tx, prev); err != nil {
				return err
			}
			n := 0
			for _, keys := range changed {
				n += len(keys)
			}
			reload = len(changed[postgres.FeedRuleset]) > 0 || n > reloadAbove
		}
		if reload {
			var err error
			var clock uint64
			if cur != nil {
				clock = cur.clock
			}
			next, err = loadViewState(ctx, tx, clock)
			return err
		}
		if err := d.read(ctx, tx, cur.version, changed); err != nil {
			return err
		}
		snaps, exceptions := map[int64]bool{}, map[string]bool{}
		v.mu.RLock()
		cur.referenced(snaps, exceptions)
		v.mu.RUnlock()
		return d.readReferenced(ctx, tx, snaps, exceptions)
	})
	if err != nil {
		// Whatever broke (the server, the network, a timeout mid-read), the next catch-up starts on a new one.
		v.closeConn(ctx)
		return fmt.Errorf("gate view: %w", err)
	}
	token, err := gcos.ParseConsistencyToken(snapshot)
	if err != nil {
		return fmt.Errorf("gate view: read its snapshot: %w", err)
	}
	if len(changed[postgres.FeedBirth]) > 0 || reload {
		v.birthGen.Add(1)
		if reload {
			v.objects.Clear()
			v.objectCount.Store(0)
		}
		for _, k := range changed[postgres.FeedBirth] {
			if k == postgres.AllBirths {
				v.objects.Clear()
				v.objectCount.Store(0)
			} else if ref, err := postgres.ParseObjectRef(k); err == nil {
				v.objects.Delete(ref)
			}
		}
	}
	v.mu.Lock()
	if reload {
		v.state = next
	} else {
		v.state.applyRows(d)
		v.state.applyReferenced(d)
	}
	v.snapshot, v.token, v.asOf, v.dbAsOf, v.timeline = snapshot, token, began, dbNow, *timeline
	v.offset = dbNow.Sub(began.Add(read.Sub(began) / 2))
	v.mu.Unlock()
	if reload {
		v.reloads.Add(1)
	}
	v.prune(ctx, began, xmin)
	return nil
}

func readFeed(ctx context.Context, tx pgx.Tx, prev string) (map[string][]string, error) {
	rows, err := tx.Query(ctx, viewFeedSQL, prev)
	if err != nil {
		return nil, fmt.Errorf("read the change feed: %w", err)
	}
	changed := map[string][]string{}
	var kind, key string
	_, err = pgx.ForEachRow(rows, []any{&kind, &key}, func() error {
		changed[kind] = append(changed[kind], key)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read the change feed: %w", err)
	}
	return changed, nil
}

// prune keeps the change feed's partitions (postgres.MaintainLogTx): it makes them ahead, and drops the notes of
// transactions that ended more than gate.feed_retention ago, by partition: every view that caught up since has read
// them. A view whose last snapshot lies below what was dropped reloads. Until the view has a sample that old it
// drops nothing (mark 0) and only makes partitions.
func (v *VerdictView) prune(ctx context.Context, at time.Time, xmin string) {
	if len(v.samples) == 0 || at.Sub(v.samples[len(v.samples)-1].at) >= v.feedRetained/10 {
		v.samples = append(v.samples, horizonSample{at: at, xmin: xmin})
	}
	if !v.lastPrune.IsZero() && at.Sub(v.lastPrune) < v.feedRetained/10 {
		return
	}
	mark := "0"
	cut := -1
	for i, s := range v.samples {
		if at.Sub(s.at) >= v.feedRetained {
			cut = i
		}
	}
	if cut >= 0 {
		mark = v.samples[cut].xmin
		v.samples = v.samples[cut+1:]
	}
	v.lastPrune = at
	var res postgres.LogMaintained
	err := pgx.BeginFunc(ctx, v.g.pool, func(tx pgx.Tx) (err error) {
		res, err = postgres.MaintainLogTx(ctx, tx, postgres.ChangeFeedLog, postgres.LogRetention{Width: v.feedWidth, Keep: v.feedRetained, Mark: mark})
		return err
	})
	switch {
	case err != nil && ctx.Err() == nil:
		v.g.logger.Warn("gate view: maintain the change feed", "err", err)
	case res.Deferred:
		v.g.logger.Debug("gate view: the change feed's maintenance waits for its lock until the next pass")
	}
}
