package scan

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"

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
	cfg    Config
	logger *slog.Logger

	// settle waits until the intake has handed off every source row committed before an instant (the audit's
	// cut, WithSettle); nil: the audit and its proof do not wait.
	settle func(ctx context.Context, at time.Time) error
	// ledger reads the invariant of every scope (or one) and raises or resolves its drift findings (the gate's
	// Invariant, WithLedger); nil: the full audit reports no ledger.
	ledger func(ctx context.Context, scope string) (gcos.LedgerReport, error)

	// stormClear is when (unix nanoseconds) this stage last found no group_invalidation_storm open: it looks again
	// no sooner than stormRecheck later (stormThrottle).
	stormClear atomic.Int64
	groups     postgres.GroupCount // the storm throttle's denominator
}

// Config is what the scan stage decides by: its own section (scan.*) and, of the others, only what it reads.
type Config struct {
	Scan gcos.ScanConfig
	// LowRiskClasses are the classes whose stale verdicts may wait (gate.low_risk_classes): a scan takes the others
	// first.
	LowRiskClasses []string
	// LeaseTTL paces the look for a due full audit (roles.lease_ttl).
	LeaseTTL gcos.Duration
	Outage   gcos.OutageConfig
	// Principals and Binding are what the full audit checks the ruleset's owners and the axes against.
	Principals []gcos.Principal
	Binding    gcos.SourceBinding
}

// ConfigOf picks the scan stage's configuration out of the whole.
func ConfigOf(c gcos.Config) Config {
	return Config{Scan: c.Scan, LowRiskClasses: c.Gate.LowRiskClasses, LeaseTTL: c.Roles.LeaseTTL, Outage: c.Outage,
		Principals: c.Principals, Binding: c.SourceBinding}
}

// New returns the scan stage over store, deciding by its sections of the store's configuration.
func New(store *postgres.Store, opts ...Option) *Stage {
	s := &Stage{core: store, pool: store.Pool(), cfg: ConfigOf(store.Config()), logger: store.Logger()}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Option configures a Stage at construction.
type Option func(*Stage)

// WithSettle gives the stage the intake's wait (intake.Stage.HandedOff): settle returns once every source row
// committed before at has been handed off, or says why not. The full audit and its proof wait with it at their
// instant, so what was still in flight is never counted as a lost signal, a drift or a mismatch.
func WithSettle(settle func(ctx context.Context, at time.Time) error) Option {
	return func(s *Stage) { s.settle = settle }
}

// WithLedger gives the stage the invariant's read (gate.Gate.Invariant): the full audit reports the ledger of every
// scope once its scans are done, which raises or resolves each scope's drift finding.
func WithLedger(ledger func(ctx context.Context, scope string) (gcos.LedgerReport, error)) Option {
	return func(s *Stage) { s.ledger = ledger }
}

// Store is the store core the stage runs on.
func (s *Stage) Store() *postgres.Store { return s.core }
