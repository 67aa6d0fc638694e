package intake

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/evaluate"
	"gcos/postgres"
)

// BackfillOptions parameterise a backfill.
type BackfillOptions struct {
	Proposer string                  // proposer of the ruleset the backfill computes (default "gcos")
	Progress func(done, total int64) // snapshot progress
}

// BackfillResult reports a backfill.
type BackfillResult struct {
	RunID               string        `json:"run_id"`
	SnapshotID          int64         `json:"snapshot_id"`
	SnapshotReused      bool          `json:"snapshot_reused"`
	RulesetVersion      string        `json:"ruleset_version"`
	RulesetStatus       string        `json:"ruleset_status"`
	ProposedRuleset     string        `json:"proposed_ruleset,omitempty"` // a draft differing from the active one
	Births              int64         `json:"births"`
	Groups              int           `json:"groups"`
	RowsWritten         int64         `json:"rows_written"`
	ObjectsMaterialized int64         `json:"objects_materialized"`
	ObjectsRetired      int64         `json:"objects_retired"`
	InventoryGaps       []string      `json:"inventory_gaps"`
	CursorsAtHorizon    []string      `json:"cursors_started_at_horizon"` // tail sources that start after the seed (handshake)
	Elapsed             time.Duration `json:"elapsed_ns"`
	Token               string        `json:"token,omitempty"` // the consistency token after the backfill (gcos backfill)
}

// Backfill is the first full pass (phase seeding): capture the seed snapshot, compute the ruleset and seed one
// candidate row per group. Re-running it with unchanged sources reuses the snapshot and writes nothing.
// It runs as the holder of RoleBackfill (ECONFLICT while another process holds it).
func (s *Stage) Backfill(ctx context.Context, opts BackfillOptions) (res BackfillResult, err error) {
	err = s.core.AsRole(ctx, postgres.RoleBackfill, func(ctx context.Context) error {
		var err error
		res, err = s.runBackfill(ctx, opts)
		return err
	})
	return res, err
}

func (s *Stage) runBackfill(ctx context.Context, opts BackfillOptions) (BackfillResult, error) {
	start := time.Now()
	if opts.Proposer == "" {
		opts.Proposer = "gcos"
	}
	res := BackfillResult{RunID: postgres.NewRunID("gov-backfill")}
	if err := s.core.StartRun(ctx, res.RunID, postgres.ModeBackfill, postgres.PhaseSeeding); err != nil {
		return res, err
	}
	err := s.backfill(ctx, opts, &res)
	if ferr := s.core.FinishRun(context.WithoutCancel(ctx), res.RunID, postgres.RunCounts{Snapshot: res.SnapshotID, Ruleset: res.RulesetVersion,
		Scanned: int64(res.Groups), Changed: res.RowsWritten, Materialized: res.ObjectsMaterialized, Retired: res.ObjectsRetired}, err); ferr != nil {
		err = errors.Join(err, ferr)
	}
	res.Elapsed = time.Since(start)
	return res, err
}

func (s *Stage) backfill(ctx context.Context, opts BackfillOptions, res *BackfillResult) error {
	rs, proposed, err := s.core.RulesetForScan(ctx, opts.Proposer)
	if err != nil {
		return err
	}
	res.RulesetVersion, res.RulesetStatus, res.ProposedRuleset = rs.Version, rs.Status, proposed
	// The handshake's horizon is read before the snapshot, so every row below it is in the snapshot.
	sources, err := s.ensureSeedCursors(ctx)
	if err != nil {
		return err
	}
	horizon, err := s.readSeedHorizon(ctx)
	if err != nil {
		return err
	}
	snap, err := s.core.CaptureSnapshot(ctx, postgres.CaptureOptions{Scope: postgres.SnapshotBackfill, RunID: res.RunID,
		RulesetVersion: rs.Version, Progress: opts.Progress, ReuseUnchanged: true})
	if err != nil {
		return err
	}
	res.SnapshotID, res.SnapshotReused, res.Births, res.Groups = snap.ID, snap.Reused, snap.Metrics.Totals.Births, len(snap.Groups)
	t0 := time.Now()
	return s.inTx(ctx, func(tx pgx.Tx) error {
		defer func() { s.logger.Debug("backfill: seeded", "elapsed", time.Since(t0)) }()
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.seed', 0))`); err != nil {
			return err
		}
		// The whole estate, in postgres.LockOrder: group rows (and new groups), then candidate rows.
		if err := postgres.LockGroups(ctx, tx); err != nil {
			return err
		}
		if err := postgres.UpsertGroups(ctx, tx, snap.Groups); err != nil {
			return err
		}
		if err := postgres.LockCandidates(ctx, tx, rs.Version); err != nil {
			return err
		}
		ev, err := evaluate.New(ctx, s.core, tx, rs)
		if err != nil {
			return err
		}
		values := make([]postgres.CandidateValues, 0, len(snap.Groups))
		gaps := map[string]bool{}
		for _, g := range snap.Groups {
			v, err := ev.Evaluate(g, "")
			if err != nil {
				return fmt.Errorf("evaluate group %s: %w", g.Key, err)
			}
			if v.InputQuality == string(gcos.InputBirthOrRegistryMissing) && g.SourceRegistry != nil {
				gaps[*g.SourceRegistry] = true
			}
			values = append(values, v)
		}
		if res.RowsWritten, err = postgres.SeedCandidates(ctx, tx, snap.ID, rs.Version, res.RunID, values); err != nil {
			return err
		}
		if err := postgres.LinkAudit(ctx, tx, "governance_candidate_state", rs.Version, snap.AuditID, `source_snapshot_ref = $3`, snap.ID); err != nil {
			return err
		}
		for coll := range gaps {
			res.InventoryGaps = append(res.InventoryGaps, coll)
		}
		sort.Strings(res.InventoryGaps)
		for _, coll := range res.InventoryGaps {
			if snap.Reused {
				// A re-run over unchanged sources observes nothing new: an open finding for the gap stands as it
				// is (a re-run is a no-op); one an operator closed is re-opened, never hidden.
				var open bool
				if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM system_issues WHERE coalesce_key = $1 AND status = 'open')`,
					gcos.CoalesceKey(gcos.IssueBackfillInventoryGap, coll)).Scan(&open); err != nil {
					return fmt.Errorf("read inventory gap finding: %w", err)
				}
				if open {
					continue
				}
			}
			if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueBackfillInventoryGap, Subject: coll, RunID: res.RunID, RulesetVersion: rs.Version,
				Evidence: map[string]any{"collection_name": coll, "reason": "births exist but the collection (or its class) is missing from its registry", "snapshot_id": snap.ID}}); err != nil {
				return err
			}
		}
		s.logger.Debug("backfill: groups seeded", "rows", res.RowsWritten, "elapsed", time.Since(t0))
		mat, ret, err := ev.MaterializeObjects(ctx, tx, snap, res.RunID)
		if err != nil {
			return err
		}
		res.ObjectsMaterialized, res.ObjectsRetired = mat, ret
		res.CursorsAtHorizon, err = startCursorsAtHorizon(ctx, tx, sources, horizon, res.RunID)
		if err != nil || !slices.Contains(res.CursorsAtHorizon, postgres.BirthTailSource(s.cfg.Binding).Name) {
			return err
		}
		return s.core.KeepSeedCounts(ctx, tx, snap)
	})
}
