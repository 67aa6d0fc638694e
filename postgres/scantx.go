package postgres

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Scan transactions write GCOS's own tables and its audit row, never a birth. The births tail's horizon waits for
// every open transaction that might still commit a birth under it (intake's tailHorizonSQL); waiting for the scan
// ticks too held every births handoff behind the tick running beside it, so under a births load the intake lagged
// by a tick and handed off births the tick had already counted, which re-marked their groups for nothing. A scan
// transaction therefore names itself — its backend pid and start, exactly as pg_stat_activity shows them — and the
// births horizon passes over it. The pair names one transaction of one backend: a later transaction on the same
// connection, or a pooler handing the backend on to a writer, is waited for as before. Another process's scans are
// not named here and are waited for.

// ScanTx names one open transaction: its backend's pid and its start (pg_stat_activity's pid and xact_start).
type ScanTx struct {
	PID   int32
	Start time.Time
}

// scanTxs are this process's open scan transactions.
type scanTxs struct {
	mu   sync.Mutex
	open map[ScanTx]bool
}

func (o *scanTxs) add(t ScanTx) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.open == nil {
		o.open = map[ScanTx]bool{}
	}
	o.open[t] = true
}

func (o *scanTxs) remove(t ScanTx) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.open, t)
}

// ScanTransactions are this process's scan transactions open now (InScanTx), in no particular order.
func (s *Store) ScanTransactions() []ScanTx {
	s.scans.mu.Lock()
	defer s.scans.mu.Unlock()
	return slices.Collect(maps.Keys(s.scans.open))
}

// InScanTx is InTx for a transaction that inserts no birth (a scan tick): it names itself first, and stays named
// until it has committed or rolled back, so the births tail does not wait for it.
func (s *Store) InScanTx(ctx context.Context, fn func(pgx.Tx) error) error {
	var named *ScanTx
	defer func() {
		if named != nil {
			s.scans.remove(*named)
		}
	}()
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if named == nil {
			var t ScanTx
			if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), now()`).Scan(&t.PID, &t.Start); err != nil {
				return fmt.Errorf("name the scan transaction: %w", err)
			}
			s.scans.add(t)
			named = &t
		}
		return fn(tx)
	})
}

// ScanTxArrays are the scan transactions as the parallel arrays the horizon statements take (pids, starts).
func ScanTxArrays(txs []ScanTx) ([]int32, []time.Time) {
	pids, starts := make([]int32, len(txs)), make([]time.Time, len(txs))
	for i, t := range txs {
		pids[i], starts[i] = t.PID, t.Start
	}
	return pids, starts
}
