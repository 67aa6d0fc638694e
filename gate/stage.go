package gate

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sync/errgroup"

	"gcos"
	"gcos/postgres"
)

// Gate is the gate stage (SPEC §12): the production gate's single and batch decisions, the in-process verdict view
// they answer from, the synchronous re-scan of a stale high-risk group, explain, the invariant read and the routing
// of read-throughs to a replica. It reads the candidate state the scans write and writes only its follow-ups
// (dirty marks, findings). Build it with New; Run keeps its view and its replica proof current.
type Gate struct {
	core *postgres.Store
	pool *pgxpool.Pool // the core's pool: explain, the invariant, the view's feed pruning
	// gatePool answers the gate (its reads and its follow-ups) and nothing else, so readers, scans and intake can
	// never take the connections a gate decision needs (the core's gate pool: gate.pool_conns).
	gatePool *pgxpool.Pool
	cfg      Config
	logger   *slog.Logger

	view    atomic.Pointer[VerdictView] // nil: every question reads through
	rescan  *gateRescan                 // nil: no synchronous re-scan, a stale high-risk verdict blocks
	replica *replicaReads               // nil: no replica, read-throughs go to the primary
	handOff HandOff                     // nil: a question with a token or at full consistency blocks (settle)

	followUps  followUpLog // follow-ups recently written
	gateOutage gateOutage
	// gateSQLText and birthRawSQLText are built once from the source binding: the gate is the hot path.
	gateSQLText, birthRawSQLText string

	search *searchHolds // the snapshots held for resource searches
}

// Config is what the gate decides by: its own section (gate.*) and, of the others, only what it reads.
type Config struct {
	Gate gcos.GateConfig
	// CoalesceWindow is how long a follow-up the gate wrote is not written again (scan.coalesce_window).
	CoalesceWindow gcos.Duration
	Outage         gcos.OutageConfig
}

// ConfigOf picks the gate's configuration out of the whole.
func ConfigOf(c gcos.Config) Config {
	return Config{Gate: c.Gate, CoalesceWindow: c.Scan.CoalesceWindow, Outage: c.Outage}
}

// New builds the gate over core, deciding by its sections of the core's configuration. rescan re-scans stale groups
// synchronously (the scan stage's RescanGroups, handed in by whoever assembles the stages; nil: never, such answers
// block). With gate.view on, the gate answers from a verdict view that Run keeps current; with a replica open in the
// core (database.replica_url), read-throughs go to the replica while Run proves it fresh.
func New(core *postgres.Store, rescan Rescanner, opts ...Option) *Gate {
	g := over(core)
	for _, o := range opts {
		o(g)
	}
	if rescan != nil {
		g.rescan = &gateRescan{fn: rescan, slots: make(chan struct{}, g.cfg.Gate.RescanConcurrency)}
	}
	if _, p := core.GatePools(); p != nil {
		g.replica = newReplicaReads(p, core.Config(), g.logger) // a store core of its own over the replica
	}
	if g.cfg.Gate.View {
		g.view.Store(NewVerdictView(g))
	}
	return g
}

// over is a gate that reads core's database and nothing else: no view, no re-scan, no replica.
func over(core *postgres.Store) *Gate {
	cfg := ConfigOf(core.Config())
	gatePool, _ := core.GatePools()
	g := &Gate{core: core, pool: core.Pool(), gatePool: gatePool, cfg: cfg, logger: core.Logger(),
		search: &searchHolds{held: map[string]*heldSnapshot{}}}
	b := core.BirthBinding()
	g.gateSQLText, g.birthRawSQLText = gateSQL(b), birthRawSQL(b)
	g.gateOutage.log = gcos.NewOutageLog("gate: read candidate state (such answers block)", time.Second, cfg.Outage, g.logger)
	return g
}

// Store is the store core the gate reads.
func (g *Gate) Store() *postgres.Store { return g.core }

// Run keeps the verdict view current and proves the replica fresh (when the gate has them) until ctx ends or one
// of them fails.
func (g *Gate) Run(ctx context.Context) error {
	group, ctx := errgroup.WithContext(ctx)
	if v := g.view.Load(); v != nil {
		group.Go(func() error { return wrap("gate view", v.Run(ctx)) })
	}
	defer g.ReleaseSearches()
	if g.replica != nil {
		g.logger.Info("gate: reads through from the replica while it is proven within gate.max_staleness of the primary, else from the primary",
			"max_staleness", g.cfg.Gate.MaxStaleness.Duration())
		group.Go(func() error { return wrap("replica monitor", g.runReplicaMonitor(ctx)) })
	}
	return group.Wait()
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}
