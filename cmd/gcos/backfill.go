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
			return intake.New(store).Backfill(ctx, intake.BackfillOptions{Proposer: by, Progress: a.progressFunc("snapshot")})
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
	return human
}
