package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"gcos"
	"gcos/intake"
	"gcos/postgres"
)

func init() {
	extraCommands = append(extraCommands, (*app).snapshotCommand, (*app).rulesetCommand, (*app).backfillCommand)
}

// progressFunc draws a progress bar on a terminal (never with --json), else nothing.
func (a *app) progressFunc(what string) func(done, total int64) {
	f, ok := a.stderr.(*os.File)
	if a.jsonOut || !ok {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	var bar *progressbar.ProgressBar
	return func(done, total int64) {
		if bar == nil {
			bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(f), progressbar.OptionSetDescription(what),
				progressbar.OptionShowCount(), progressbar.OptionOnCompletion(func() { fmt.Fprintln(f) }))
		}
		_ = bar.Set64(done)
	}
}

func (a *app) backfillCommand() *cobra.Command {
	var by string
	cmd := &cobra.Command{
		Use:   "backfill",
		Short: "first full pass: seed snapshot, ruleset and one candidate row per group (a re-run is a no-op)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			res, err := intake.New(store).Backfill(cmd.Context(), intake.BackfillOptions{Proposer: by, Progress: a.progressFunc("snapshot")})
			if err != nil {
				return err
			}
			human := fmt.Sprintf("run %s: %d births → %d groups under snapshot %d (reused %v), ruleset %s (%s); %d rows written, %d objects materialized, %d retired, in %s",
				res.RunID, res.Births, res.Groups, res.SnapshotID, res.SnapshotReused, res.RulesetVersion, res.RulesetStatus,
				res.RowsWritten, res.ObjectsMaterialized, res.ObjectsRetired, res.Elapsed.Round(1e6))
			if res.ProposedRuleset != "" {
				human += fmt.Sprintf("\nregistries moved: ruleset %s awaits approval (gcos ruleset diff / activate)", res.ProposedRuleset)
			}
			if len(res.InventoryGaps) > 0 {
				human += "\ninventory gaps (backfill_inventory_gap): " + strings.Join(res.InventoryGaps, ", ")
			}
			return a.print(res, human)
		},
	}
	cmd.Flags().StringVar(&by, "by", "gcos", "proposer of the ruleset the backfill computes")
	return cmd
}

func (a *app) snapshotCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "source snapshots (evolution_snapshots, scope governance.*)"}
	var scope string
	capture := &cobra.Command{
		Use: "capture", Short: "capture a source snapshot", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			snap, err := store.CaptureSnapshot(cmd.Context(), postgres.CaptureOptions{Scope: scope, RunID: postgres.NewRunID("gov-capture"), Progress: a.progressFunc("snapshot")})
			if err != nil {
				return err
			}
			info := map[string]any{"id": snap.ID, "scope": snap.Scope, "snapshot_at": snap.SnapshotAt, "totals": snap.Metrics.Totals,
				"previous_snapshot_id": snap.Delta.PreviousSnapshotID, "groups_changed": len(snap.Delta.Groups)}
			return a.print(info, fmt.Sprintf("snapshot %d (%s): %d births in %d groups, %d changed since previous",
				snap.ID, snap.Scope, snap.Metrics.Totals.Births, snap.Metrics.Totals.Groups, len(snap.Delta.Groups)))
		},
	}
	capture.Flags().StringVar(&scope, "scope", postgres.SnapshotScan, "governance.backfill | governance.audit | governance.scan")
	list := &cobra.Command{
		Use: "list", Short: "list snapshots, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			snaps, err := store.ListSnapshots(cmd.Context(), 50)
			if err != nil {
				return err
			}
			var b strings.Builder
			for _, s := range snaps {
				fmt.Fprintf(&b, "%6d  %s  %-20s births=%d groups=%d changed=%d run=%s\n", s.ID, s.SnapshotAt.UTC().Format("2006-01-02T15:04:05Z"), s.Scope, s.Totals.Births, s.Totals.Groups, s.Changed, s.RunID)
			}
			return a.print(snaps, b.String())
		},
	}
	show := &cobra.Command{
		Use: "show ID", Short: "show one snapshot", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := strconv.ParseInt(args[0], 10, 64)
			if err != nil {
				return gcos.Errorf(gcos.EINVALID, "snapshot id %q is not a number", args[0])
			}
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			snap, err := store.GetSnapshot(cmd.Context(), id)
			if err != nil {
				return err
			}
			return a.print(snap, fmt.Sprintf("snapshot %d (%s) at %s: %d births, %d groups, %d changed vs %v",
				snap.ID, snap.Scope, snap.SnapshotAt.UTC().Format("2006-01-02T15:04:05Z"), snap.Metrics.Totals.Births,
				len(snap.Metrics.Groups), len(snap.Delta.Groups), snap.Delta.PreviousSnapshotID))
		},
	}
	var dry bool
	prune := &cobra.Command{
		Use: "prune", Short: "delete unreferenced snapshots beyond the retention policy (logged and audited)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			res, err := store.PruneSnapshots(cmd.Context(), dry)
			if err != nil {
				return err
			}
			a.logger.Info("snapshot prune", "removed", len(res.Removed), "kept", res.Kept, "dry_run", dry)
			return a.print(res, fmt.Sprintf("pruned %d snapshots (%v), kept %d", len(res.Removed), res.Removed, res.Kept))
		},
	}
	prune.Flags().BoolVar(&dry, "dry-run", false, "only report what would be removed")
	cmd.AddCommand(capture, list, show, prune)
	return cmd
}

func (a *app) rulesetCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "ruleset", Short: "content-addressed ruleset versions"}
	var by string
	compute := &cobra.Command{
		Use: "compute", Short: "hash the current rule registries and verdict policy into a draft version", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			row, created, err := store.ComputeRuleset(cmd.Context(), by)
			if err != nil {
				return err
			}
			state := "unchanged"
			if created {
				state = "new draft"
			}
			return a.print(map[string]any{"ruleset": row, "created": created},
				fmt.Sprintf("%s (%s, status %s, proposed by %s): %d measurements, %d laws, absent %v",
					row.Version, state, row.Status, row.ProposedBy, len(row.Summary.MeasurementIDs), len(row.Summary.LawCodes), row.Summary.Absent))
		},
	}
	compute.Flags().StringVar(&by, "by", "gcos", "proposer")
	list := &cobra.Command{
		Use: "list", Short: "list ruleset versions", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			rows, err := store.ListRulesets(cmd.Context())
			if err != nil {
				return err
			}
			var b strings.Builder
			for _, r := range rows {
				fmt.Fprintf(&b, "%s  %-10s proposed by %s at %s", r.Version, r.Status, r.ProposedBy, r.ProposedAt.UTC().Format("2006-01-02T15:04:05Z"))
				if r.ActivatedBy != nil {
					fmt.Fprintf(&b, ", activated by %s (%s)", *r.ActivatedBy, deref(r.ApprovalRef))
				}
				b.WriteString("\n")
			}
			return a.print(rows, b.String())
		},
	}
	show := &cobra.Command{
		Use: "show VERSION", Short: "show one ruleset version", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			r, err := store.GetRuleset(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.print(r, fmt.Sprintf("%s %s\ncontent_hash %s\nproposed by %s; supersedes %s\nmeasurements %d, laws %v, absent %v",
				r.Version, r.Status, r.ContentHash, r.ProposedBy, deref(r.Supersedes), len(r.Summary.MeasurementIDs), r.Summary.LawCodes, r.Summary.Absent))
		},
	}
	diff := &cobra.Command{
		Use: "diff FROM TO", Short: "changed components, rule rows and the groups the change would dirty", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			d, err := store.DiffRulesets(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			human := fmt.Sprintf("%s → %s\nchanged components: %v\nmeasurements: +%v -%v ~%v\npolicy changed: %v\nwould dirty %d of %d groups",
				d.From, d.To, d.ChangedComponents, d.Measurements.Added, d.Measurements.Removed, d.Measurements.Modified,
				d.PolicyChanged, len(d.Groups), d.GroupsTotal)
			if len(d.Unresolved) > 0 {
				human += fmt.Sprintf("\nUNRESOLVED law codes %v: every group is dirtied and ruleset_drift is raised on activation", d.Unresolved)
			}
			return a.print(d, human)
		},
	}
	var approval, actor string
	activate := &cobra.Command{
		Use: "activate VERSION", Short: "activate a draft (needs --approval and an actor other than the proposer)", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			store, err := a.openPrepared(cmd.Context(), false)
			if err != nil {
				return err
			}
			res, err := store.ActivateRuleset(cmd.Context(), args[0], approval, actor)
			if err != nil {
				return err
			}
			return a.print(res, fmt.Sprintf("%s active (supersedes %s); %d groups dirtied, %d carried unchanged",
				res.Version, deref(res.Superseded), res.DirtiedGroups, res.CarriedGroups))
		},
	}
	activate.Flags().StringVar(&approval, "approval", "", "approval reference (required)")
	activate.Flags().StringVar(&actor, "by", "", "approving actor (required; not the proposer)")
	cmd.AddCommand(compute, list, show, diff, activate)
	return cmd
}

func deref(p *string) string {
	if p == nil {
		return "-"
	}
	return *p
}
