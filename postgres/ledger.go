package postgres

import (
	"context"
	"fmt"

	"gcos"
)

// NoJIT turns PostgreSQL's JIT compilation off for the rest of a transaction. The ledger's view is estimated far
// above jit_optimize_above_cost (its per-row coverage functions), so PostgreSQL compiles it: measured on the demo
// world at 1M births, 2.7 s of a 3.4 s read was compilation, for a plan that runs in well under a second without it.
const NoJIT = `SET LOCAL jit = off`

// ReadLedgers reads v_invariant_ledger through q (a transaction that has run NoJIT, for speed), for one scope or every scope (scope ""), with the snapshot the
// ledger counts against. It only reads: raising or resolving the drift finding is the caller's.
func ReadLedgers(ctx context.Context, q Querier, scope string) (gcos.LedgerReport, error) {
	rep := gcos.LedgerReport{Closes: true, Ledgers: []gcos.Ledger{}}
	rows, err := q.Query(ctx, `
		SELECT scope, snapshot_id, coalesce(total, 0), covered, orphans, approved_exceptions, retired_or_ignored, stale, deferred_birth, class_0,
		       coalesce(unplaced, 0)
		FROM v_invariant_ledger WHERE ($1 = '' OR scope = $1) ORDER BY scope`, scope)
	if err != nil {
		return rep, fmt.Errorf("read invariant ledger: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var l gcos.Ledger
		if err := rows.Scan(&l.Scope, &rep.SnapshotID, &l.Total, &l.Covered, &l.Orphans, &l.ApprovedExceptions,
			&l.RetiredOrIgnored, &l.Stale, &l.DeferredBirth, &l.Class0, &l.Uncounted); err != nil {
			return rep, fmt.Errorf("read invariant ledger: %w", err)
		}
		rep.Ledgers = append(rep.Ledgers, l)
		rep.Closes = rep.Closes && l.Closes()
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("read invariant ledger: %w", err)
	}
	return rep, nil
}
