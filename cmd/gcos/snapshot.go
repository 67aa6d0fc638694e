package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/postgres"
)

func (a *app) snapshotCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "snapshot", Short: "source snapshots (evolution_snapshots, scope governance.*)"}
	var scope string
	// captured is what `snapshot capture --json` prints: the snapshot's summary, not its per-group metrics.
	type captured struct {
		ID            int64                   `json:"id"`
		Scope         string                  `json:"scope"`
		SnapshotAt    time.Time               `json:"snapshot_at"`
		Totals        postgres.SnapshotTotals `json:"totals"`
		PreviousID    *int64                  `json:"previous_snapshot_id"`
		GroupsChanged int                     `json:"groups_changed"`
	}
	capture := &cobra.Command{
		Use: "capture", Short: "capture a source snapshot", Args: cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) (captured, error) {
			snap, err := store.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: scope, RunID: postgres.NewRunID("gov-capture"), Progress: a.progressFunc("snapshot")})
			return captured{ID: snap.ID, Scope: snap.Scope, SnapshotAt: snap.SnapshotAt, Totals: snap.Metrics.Totals,
				PreviousID: snap.Delta.PreviousSnapshotID, GroupsChanged: len(snap.Delta.Groups)}, err
		}, func(c captured) string {
			return fmt.Sprintf("snapshot %d (%s): %d births in %d groups, %d changed since previous",
				c.ID, c.Scope, c.Totals.Births, c.Totals.Groups, c.GroupsChanged)
		}),
	}
	capture.Flags().StringVar(&scope, "scope", postgres.SnapshotScan, "governance.backfill | governance.audit | governance.scan")
	list := &cobra.Command{
		Use: "list", Short: "list snapshots, newest first", Args: cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) ([]postgres.SnapshotInfo, error) {
			return store.ListSnapshots(ctx, 50)
		}, func(snaps []postgres.SnapshotInfo) string {
			var b strings.Builder
			for _, s := range snaps {
				fmt.Fprintf(&b, "%6d  %s  %-20s births=%d groups=%d changed=%d run=%s\n", s.ID, s.SnapshotAt.UTC().Format("2006-01-02T15:04:05Z"), s.Scope, s.Totals.Births, s.Totals.Groups, s.Changed, s.RunID)
			}
			return b.String()
		}),
	}
	show := &cobra.Command{
		Use: "show ID", Short: "show one snapshot",
		Args: argsAnd(cobra.ExactArgs(1), func(args []string) error {
			if _, err := strconv.ParseInt(args[0], 10, 64); err != nil {
				return gcos.Errorf(gcos.EINVALID, "snapshot id %s is not a number", gcos.Quote(args[0]))
			}
			return nil
		}),
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, args []string) (postgres.Snapshot, error) {
			id, _ := strconv.ParseInt(args[0], 10, 64) // checked in Args
			return store.GetSnapshot(ctx, id)
		}, func(snap postgres.Snapshot) string {
			return fmt.Sprintf("snapshot %d (%s) at %s: %d births, %d groups, %d changed vs %v",
				snap.ID, snap.Scope, snap.SnapshotAt.UTC().Format("2006-01-02T15:04:05Z"), snap.Metrics.Totals.Births,
				len(snap.Metrics.Groups), len(snap.Delta.Groups), snap.Delta.PreviousSnapshotID)
		}),
	}
	var dry bool
	prune := &cobra.Command{
		Use: "prune", Short: "delete unreferenced snapshots beyond the retention policy (logged and audited)", Args: cobra.NoArgs,
		RunE: storeRunE(a, func(ctx context.Context, store *postgres.Store, _ []string) (postgres.PruneResult, error) {
			res, err := store.PruneSnapshots(ctx, dry)
			if err == nil {
				a.logger.Info("snapshot prune", "removed", len(res.Removed), "kept", res.Kept, "dry_run", dry)
			}
			return res, err
		}, func(res postgres.PruneResult) string {
			return fmt.Sprintf("pruned %d snapshots (%v), kept %d", len(res.Removed), res.Removed, res.Kept)
		}),
	}
	prune.Flags().BoolVar(&dry, "dry-run", false, "only report what would be removed")
	cmd.AddCommand(capture, list, show, prune)
	return cmd
}
