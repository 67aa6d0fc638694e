package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"gcos/intake"
	"gcos/postgres"
)

func (a *app) backfillCommand() *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "backfill",
		Short: "first full pass: seed snapshot, ruleset and one candidate row per group (a re-run is a no-op)",
		Args:  cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) (intake.BackfillResult, error) {
			res, err := intake.New(store).Backfill(ctx, intake.BackfillOptions{Proposer: by, Progress: a.progressFunc("snapshot")})
			if err == nil {
				res.Token = writeToken(ctx, a, store)
			}
			return res, err
		}, backfillText),
	}
	cmd.Flags().StringVar(&by, "by", "gcos", "proposer of the ruleset the backfill computes")
	return cmd
}

func backfillText(res intake.BackfillResult) string {
	human := fmt.Sprintf("run %s: %d births → %d groups under snapshot %d (reused %v), ruleset %s (%s); %d rows written, %d objects materialized, %d retired, in %s",
		res.RunID, res.Births, res.Groups, res.SnapshotID, res.SnapshotReused, res.RulesetVersion, res.RulesetStatus,
		res.RowsWritten, res.ObjectsMaterialized, res.ObjectsRetired, res.Elapsed.Round(1e6))
	if res.ProposedRuleset != "" {
		human += fmt.Sprintf("\nregistries moved: ruleset %s awaits approval (gcos ruleset diff / activate)", res.ProposedRuleset)
	}
	if len(res.InventoryGaps) > 0 {
		human += "\ninventory gaps (backfill_inventory_gap): " + strings.Join(res.InventoryGaps, ", ")
	}
	return human + tokenText(res.Token)
}

// writeToken is the consistency token after a command's write committed ("" when it cannot be read: the write
// stands, and a gate question without a token reads the database within gate.max_staleness anyway).
func writeToken(ctx context.Context, a *app, store *postgres.Store) string {
	token, err := store.ConsistencyToken(ctx)
	if err != nil {
		a.logger.Warn("the write committed; its consistency token could not be read", "err", err)
	}
	return token
}

// tokenText is the line that shows a write's consistency token.
func tokenText(token string) string {
	if token == "" {
		return ""
	}
	return "\nconsistency token: " + token + " (gcos gate --at-least " + token + ")"
}
