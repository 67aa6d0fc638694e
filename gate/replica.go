package gate

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"gcos"
	"gcos/postgres"
)

// SourceReplica is the gate's answer read through from the streaming replica (SourceDatabase: from the primary).
const SourceReplica = "replica"

// replicaReads routes the gate's reads through to a streaming replica while the replica is proven at most
// gate.max_staleness behind the primary, and to the primary otherwise.
//
// The proof samples the primary's WAL insert position with the local instant taken just before asking: every
// transaction committed before that instant has its commit record below that position. Once the replica has
// replayed past a sample's position, everything committed on the primary before the sample's instant is visible on
// it, and replay only moves forward: a read that starts at t is at most t - (that instant) behind the primary.
type replicaReads struct {
	pool     *pgxpool.Pool
	reader   *Gate // a gate over the replica, for read-only requests (Reads)
	maxStale time.Duration
	refresh  time.Duration

	mu      sync.Mutex
	samples []lsnSample // the primary's insert positions, oldest first

	provenAt  atomic.Int64 // unix nanoseconds: the primary's state at this instant is visible on the replica (0: unproven)
	lag       atomic.Int64 // the last measured lag, nanoseconds (-1: unknown)
	reads     atomic.Int64 // gate reads answered from the replica
	fallbacks atomic.Int64 // gate reads sent to the primary because the replica was not proven fresh, or failed
	lagGauge  prometheus.Collector
	readCount prometheus.Collector
}

type lsnSample struct {
	at  time.Time
	lsn int64
}

// replicaSamplesKept bounds the samples kept: at gate.view_refresh cadence, several seconds of history, past which
// the replica is far beyond any sensible staleness bound anyway.
const replicaSamplesKept = 512

func newReplicaReads(pool *pgxpool.Pool, cfg gcos.Config, logger *slog.Logger) *replicaReads {
	g := cfg.Gate
	r := &replicaReads{pool: pool, reader: over(postgres.New(pool, cfg, logger)), maxStale: g.MaxStaleness.Duration(), refresh: g.ViewRefresh.Duration()}
	r.lag.Store(-1)
	r.lagGauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "gcos_replica_lag_seconds",
		Help: "How far the replica the gate reads from was proven behind the primary at its last measurement (-1: unknown).",
	}, func() float64 {
		if l := r.lag.Load(); l >= 0 {
			return time.Duration(l).Seconds()
		}
		return -1
	})
	r.readCount = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "gcos_gate_replica_reads_total",
		Help: "Gate read-throughs answered from the replica (within gate.max_staleness of the primary).",
	}, func() float64 { return float64(r.reads.Load()) })
	return r
}

// ReplicaStats says whether the gate reads from a replica now and how far behind it was last proven.
type ReplicaStats struct {
	Configured bool    `json:"configured"`
	Fresh      bool    `json:"fresh"`       // proven within gate.max_staleness: the gate reads from it
	LagSeconds float64 `json:"lag_seconds"` // -1: unknown
	Reads      int64   `json:"reads"`
	Fallbacks  int64   `json:"fallbacks"`
}

// ReplicaStats reports the replica the gate may read from (Configured false when none).
func (g *Gate) ReplicaStats() ReplicaStats {
	r := g.replica
	if r == nil {
		return ReplicaStats{LagSeconds: -1}
	}
	lag := -1.0
	if l := r.lag.Load(); l >= 0 {
		lag = time.Duration(l).Seconds()
	}
	return ReplicaStats{Configured: true, Fresh: r.fresh(), LagSeconds: lag, Reads: r.reads.Load(), Fallbacks: r.fallbacks.Load()}
}

// fresh reports whether a read starting now is proven within gate.max_staleness of the primary.
func (r *replicaReads) fresh() bool {
	p := r.provenAt.Load()
	return p != 0 && replicaFresh(time.Unix(0, p), time.Now(), r.maxStale)
}

// replicaFresh: a read starting at now from a replica proven to hold the primary's state as of proven is at most
// now - proven behind.
func replicaFresh(proven, now time.Time, maxStale time.Duration) bool {
	return !now.Before(proven) && now.Sub(proven) <= maxStale
}

// proveReplica finds the newest sample the replica has replayed past: the primary's state at its instant is
// visible on the replica. It returns the samples still of use (that one and the newer ones) and false when the
// replica has replayed past none of them.
func proveReplica(samples []lsnSample, replayed int64) ([]lsnSample, time.Time, bool) {
	newest := -1
	for i, smp := range samples {
		if smp.lsn <= replayed {
			newest = i
		}
	}
	if newest < 0 {
		return samples, time.Time{}, false
	}
	return samples[newest:], samples[newest].at, true
}

// gateReadPool is where a gate read-through goes now: the replica while it is proven fresh, else the gate's pool.
// A question asked with full consistency always reads the primary's present.
func (g *Gate) gateReadPool(full bool) (*pgxpool.Pool, string) {
	if r := g.replica; r != nil && !full {
		if r.fresh() {
			r.reads.Add(1)
			return r.pool, SourceReplica
		}
		r.fallbacks.Add(1)
	}
	return g.gatePool, SourceDatabase
}

// Reads is the gate a read-only request reads from (explain, and through its Store the lists), and its source: a
// gate over the replica while the replica is proven within gate.max_staleness of the primary (SourceReplica), else
// g itself (SourceDatabase). Only reads may go through it: the replica refuses writes.
func (g *Gate) Reads() (*Gate, string) {
	if r := g.replica; r != nil && r.fresh() {
		return r.reader, SourceReplica
	}
	return g, SourceDatabase
}

// replicaFailed takes the replica out of the gate's reads until the next measurement proves it again.
func (g *Gate) replicaFailed(err error) {
	if r := g.replica; r != nil && r.provenAt.Swap(0) != 0 {
		r.fallbacks.Add(1)
		g.logger.Warn("gate: the replica failed a read; reading the primary until it is proven fresh again", "err", err)
	}
}

// runReplicaMonitor measures the replica's lag every gate.view_refresh until ctx ends (a daemon runs it when a
// replica URL is configured; without one it returns at once). A failed measurement leaves the replica unproven,
// so the gate reads the primary: never a guess.
func (g *Gate) runReplicaMonitor(ctx context.Context) error {
	r := g.replica
	if r == nil {
		return nil
	}
	outage := gcos.NewOutageLog("measure the replica's lag (the gate reads the primary meanwhile)", r.refresh, g.cfg.Outage, g.logger)
	tick := time.NewTicker(r.refresh)
	defer tick.Stop()
	for {
		if err := g.measureReplica(ctx); err != nil && ctx.Err() == nil {
			r.provenAt.Store(0)
			r.lag.Store(-1)
			outage.Failed(err)
		} else {
			outage.Succeeded()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// measureReplica samples the primary's insert position, then reads the replica's replay position, and proves the
// replica fresh as of the newest sample it has replayed past.
func (g *Gate) measureReplica(ctx context.Context) error {
	r := g.replica
	ctx, cancel := context.WithTimeout(ctx, max(r.maxStale, time.Second))
	defer cancel()
	at := time.Now()
	var lsn int64
	if err := g.pool.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint`).Scan(&lsn); err != nil {
		return fmt.Errorf("the primary's WAL position: %w", err)
	}
	var replayed *int64
	if err := r.pool.QueryRow(ctx, `SELECT (pg_last_wal_replay_lsn() - '0/0')::bigint`).Scan(&replayed); err != nil {
		return fmt.Errorf("the replica's replay position: %w", err)
	}
	if replayed == nil {
		return fmt.Errorf("the replica URL leads to a server that is not a standby (no replay position)")
	}
	measured := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.samples = append(r.samples, lsnSample{at: at, lsn: lsn})
	if len(r.samples) > replicaSamplesKept {
		r.samples = r.samples[len(r.samples)-replicaSamplesKept:]
	}
	var proven time.Time
	var ok bool
	if r.samples, proven, ok = proveReplica(r.samples, *replayed); !ok {
		r.provenAt.Store(0)
		r.lag.Store(-1)
		return nil
	}
	r.provenAt.Store(proven.UnixNano())
	r.lag.Store(int64(measured.Sub(proven)))
	return nil
}

// Collectors are the gate's metrics for the registry that serves /metrics: the replica's lag and reads, when the
// gate has a replica.
func (g *Gate) Collectors() []prometheus.Collector {
	if g.replica == nil {
		return nil
	}
	return []prometheus.Collector{g.replica.lagGauge, g.replica.readCount}
}
