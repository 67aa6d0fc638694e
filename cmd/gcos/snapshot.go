package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/postgres"
)

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
