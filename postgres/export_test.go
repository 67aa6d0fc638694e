package postgres

import (
	"context"
	"sync"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// nondeterministicStores are the stores whose determinism self-check is perturbed. The hook is installed once, before
// any test runs, and consults this set, so parallel tests never write a shared variable (and -race stays quiet).
var nondeterministicStores sync.Map // *Store → struct{}

func init() {
	nondeterminismHook = func(s *Store, f gcos.Fingerprint) gcos.Fingerprint {
		if _, ok := nondeterministicStores.Load(s); ok {
			f.Lo++ // as if the row text depended on something other than content
		}
		return f
	}
}

// SetNondeterministic makes s's captures see a determinism self-check that differs from itself (tests only).
func SetNondeterministic(s *Store, on bool) {
	if on {
		nondeterministicStores.Store(s, struct{}{})
	} else {
		nondeterministicStores.Delete(s)
	}
}

// BatchAggregateSQL is the statement one capture batch runs (parameters: the id range [$1, $2)), for plan tests.
func BatchAggregateSQL(s *Store) string { return s.BirthBinding().baseAggregateSQL() }

// SelectedKeys exposes selectedKeys to the external tests.
var SelectedKeys = selectedKeys

// CheckFence runs the fencing check a Fenced context's transactions run before committing (tests only).
func CheckFence(ctx context.Context, tx pgx.Tx) error { return checkFence(ctx, tx) }

// MarkDirtyByReason marks groups dirty, one reason per key set, in one transaction that then runs then (tests only).
func MarkDirtyByReason(ctx context.Context, s *Store, byReason map[string][]string, then func(pgx.Tx) error) error {
	return s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := MarkDirtyTx(ctx, tx, byReason); err != nil {
			return err
		}
		return then(tx)
	})
}

// The store's reads and lease steps the tests call directly; the stages reach them through the store's own paths.

func ActiveRuleset(s *Store, ctx context.Context) (RulesetRow, error) { return s.activeRuleset(ctx) }

func LatestSnapshot(s *Store, ctx context.Context, scope string) (Snapshot, error) {
	return s.latestSnapshot(ctx, scope)
}

func RenewLease(s *Store, ctx context.Context, l *Lease) error { return s.renewLease(ctx, l) }

func RowFingerprint(s *Store, ctx context.Context, id int64) (gcos.Fingerprint, error) {
	return s.rowFingerprint(ctx, id)
}
