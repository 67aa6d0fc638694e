package scan

import (
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/postgres"
)

// Stage is the scan stage over one store: the scan tick (event-driven and incremental), the expiry of stale rows,
// the storm guard, and the periodic full audit with its verification. It reaches candidate state only through the
// store core's surface. One Stage per process keeps the storm guard's state and group count.
type Stage struct {
	core   *postgres.Store
	pool   *pgxpool.Pool
	cfg    gcos.Config
	logger *slog.Logger

	// stormOpen is what this stage knows about the group_invalidation_storm finding (stormFinding*).
	stormOpen atomic.Int32
	totalMu   sync.Mutex
	total     groupCount // the storm guard's denominator, re-counted at most every groupCountTTL
}

// New returns the scan stage over store.
func New(store *postgres.Store) *Stage {
	return &Stage{core: store, pool: store.Pool(), cfg: store.Config(), logger: store.Logger()}
}

// Store is the store core the stage runs on.
func (s *Stage) Store() *postgres.Store { return s.core }
