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
	rep := gcos.LedgerReport{Closes: true, Ledgers: []gcos.Ledger{}}
	if err := g.core.CheckScope(ctx, scope); err != nil {
		return rep, err
	}
	rows, err := g.pool.Query(ctx, `
		SELECT scope, snapshot_id, coalesce(total, 0), covered, orphans, approved_exceptions, retired_or_ignored, stale, deferred_birth, class_0,
		       coalesce(unplaced, 0)
		FROM v_invariant_ledger WHERE ($1 = '' OR scope = $1) ORDER BY scope`, scope)
	if err != nil {
		return rep, fmt.Errorf("read invariant ledger: %w", err)
	}
	for rows.Next() {
		var l gcos.Ledger
		if err := rows.Scan(&l.Scope, &rep.SnapshotID, &l.Total, &l.Covered, &l.Orphans, &l.ApprovedExceptions,
			&l.RetiredOrIgnored, &l.Stale, &l.DeferredBirth, &l.Class0, &l.Uncounted); err != nil {
			rows.Close()
			return rep, fmt.Errorf("read invariant ledger: %w", err)
		}
		rep.Ledgers = append(rep.Ledgers, l)
	}
	if err := rows.Err(); err != nil {
		return rep, fmt.Errorf("read invariant ledger: %w", err)
	}
	if scope != "" && len(rep.Ledgers) == 0 {
		return rep, gcos.Errorf(gcos.ENOTFOUND, "scope %q has no ledger yet (no full snapshot)", scope)
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
