package intake

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/postgres"
)

// Stage is the intake stage over one store: the lossless tail and its cursors, the id sweep, the preconditions, the
// handoff mapping and apply step, the backfill's handshake with the tail, and the silent-gap check. It reaches
// candidate state only through the store core's surface. One Stage per process keeps the mapping's registry cache
// warm; any number may share a database.
type Stage struct {
	core   *postgres.Store
	pool   *pgxpool.Pool
	cfg    Config
	logger *slog.Logger

	regCache registryCache
	// routeFallbacks counts changes the intake could not place precisely (gcos.Route.Fallback); the first is logged.
	routeFallbacks      atomic.Int64
	routeFallbackLogged atomic.Bool
	totalsMu            sync.Mutex
	totals              HandoffStats                      // what every applied page did (HandoffTotals)
	lags                sync.Map                          // source → its last LagReport (Lags)
	tsTypes             sync.Map                          // source → whether its cursor's column is a timestamp without time zone (present)
	registries          atomic.Pointer[[]watchedRegistry] // the watched registries that existed at the last poll
	groups              postgres.GroupCount               // the storm rule's denominator (WatchStorm)
	aheads              sync.Map                          // source → its *readAhead not yet taken (readahead.go)
	plansTaken          atomic.Int64                      // births pages whose apply took the plan made when they were read ahead
	readAheadHook       func()                            // tests: called by each read-ahead before it reads
}

// RetryDomain is the event_pending.event_domain of the intake's retry lane: its entries name their source in
// entity_table, and a dead-lettered one waits there for an operator.
const RetryDomain = "governance"

// Config is what the intake stage decides by: its own section (intake.*) and, of the others, only what it reads.
type Config struct {
	Intake gcos.IntakeConfig
	// Binding says where the births are (source_binding): the births source, the registries' tables.
	Binding gcos.SourceBinding
	Outage  gcos.OutageConfig
	// TTL gives a quarantined group's verdict its time to live (ttl).
	TTL gcos.TTLConfig
	// ObjectRiskClasses are the classes whose objects get rows of their own (gate.object_risk_classes).
	ObjectRiskClasses []string
	// StormFraction and StormBatch are the storm rule's threshold and the scan's throttle (scan.storm_fraction,
	// scan.storm_batch): a tick of the tail that newly dirties more than that share of all groups raises
	// group_invalidation_storm.
	StormFraction float64
	StormBatch    int
}

// ConfigOf picks the intake stage's configuration out of the whole.
func ConfigOf(c gcos.Config) Config {
	return Config{Intake: c.Intake, Binding: c.SourceBinding, Outage: c.Outage, TTL: c.TTL,
		ObjectRiskClasses: c.Gate.ObjectRiskClasses, StormFraction: c.Scan.StormFraction, StormBatch: c.Scan.StormBatch}
}

// New returns the intake stage over store, deciding by its sections of the store's configuration.
func New(store *postgres.Store) *Stage {
	return &Stage{core: store, pool: store.Pool(), cfg: ConfigOf(store.Config()), logger: store.Logger()}
}

// Store is the store core the stage runs on.
func (s *Stage) Store() *postgres.Store { return s.core }

// RouteFallbacks is how many changes this stage could not place precisely, so they dirtied every group they might
// affect.
func (s *Stage) RouteFallbacks() int64 { return s.routeFallbacks.Load() }

// inTx runs fn in one of the core's transactions (fenced under a Fenced context).
func (s *Stage) inTx(ctx context.Context, fn func(pgx.Tx) error) error { return s.core.InTx(ctx, fn) }

// Apply is the handoff apply step as an ApplyFunc: the Worker's default.
func (s *Stage) Apply(ctx context.Context, tx pgx.Tx, rows []postgres.TailRow) ([]RowFailure, error) {
	failures, _, err := s.ApplyHandoff(ctx, tx, rows)
	return failures, err
}
