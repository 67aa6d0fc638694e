package gate

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// Invariant reads v_invariant_ledger; a scope whose ledger does not close raises governance_schema_drift with the
// difference in its evidence, and a scope that closes again resolves it.
func (g *Gate) Invariant(ctx context.Context, scope string) (gcos.LedgerReport, error) {
	if err := g.core.CheckScope(ctx, scope); err != nil {
		return gcos.LedgerReport{Closes: true, Ledgers: []gcos.Ledger{}}, err
	}
	var rep gcos.LedgerReport
	err := pgx.BeginTxFunc(ctx, g.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, postgres.NoJIT); err != nil {
			return fmt.Errorf("read invariant ledger: %w", err)
		}
		var err error
		rep, err = postgres.ReadLedgers(ctx, tx, scope)
		return err
	})
	if err != nil {
		return rep, err
	}
	if scope != "" && len(rep.Ledgers) == 0 {
		return rep, gcos.Errorf(gcos.ENOTFOUND, "scope %s has no ledger yet (no full snapshot)", gcos.Quote(scope))
	}
	ruleset := ""
	if cur, err := g.currentRulesetVersion(ctx); err == nil {
		ruleset = cur
	}
	err = g.core.InTx(ctx, func(tx pgx.Tx) error {
		for _, l := range rep.Ledgers {
			if !l.Closes() {
				rep.Closes = false
				if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueGovernanceSchemaDrift, Subject: l.Scope, RulesetVersion: ruleset,
					Evidence: map[string]any{"scope": l.Scope, "snapshot_id": rep.SnapshotID, "total": l.Total, "sum": l.Sum(),
						"difference": l.Difference(), "ledger": l}}); err != nil {
					return err
				}
				continue
			}
			if _, err := postgres.ResolveFindingTx(ctx, tx, gcos.IssueGovernanceSchemaDrift, l.Scope, ""); err != nil {
				return err
			}
		}
		return nil
	})
	return rep, err
}

func (g *Gate) currentRulesetVersion(ctx context.Context) (string, error) {
	var v string
	err := g.pool.QueryRow(ctx, `SELECT ruleset_version FROM v_current_ruleset`).Scan(&v)
	return v, postgres.MapError(err, "current ruleset")
}
