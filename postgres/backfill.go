package postgres

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// NewRunID returns a fresh run identifier.
func NewRunID(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s-%s-%s", prefix, time.Now().UTC().Format("20060102T150405"), hex.EncodeToString(b))
}

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
}

// rulesetForScan returns the ruleset verdicts are computed under: the active one, else a draft computed from the
// current registries. It also returns the computed draft when it differs from the active one, so the operator
// can see that registries moved and a new version awaits approval.
func (s *Store) rulesetForScan(ctx context.Context, proposer string) (RulesetRow, string, error) {
	computed, _, err := s.ComputeRuleset(ctx, proposer)
	if err != nil {
		return RulesetRow{}, "", err
	}
	active, err := s.ActiveRuleset(ctx)
	switch {
	case err == nil:
		if active.Version != computed.Version {
			return active, computed.Version, nil
		}
		return active, "", nil
	case gcos.ErrorCode(err) == gcos.ENOTFOUND:
		return computed, "", nil
	default:
		return RulesetRow{}, "", err
	}
}

// Backfill is the first full pass (phase seeding): capture the seed snapshot, compute the ruleset and seed one
// candidate row per group. Re-running it with unchanged sources reuses the snapshot and writes nothing.
// It runs as the holder of RoleBackfill (ECONFLICT while another process holds it).
func (s *Store) Backfill(ctx context.Context, opts BackfillOptions) (res BackfillResult, err error) {
	err = s.asRole(ctx, RoleBackfill, func(ctx context.Context) error {
		var err error
		res, err = s.runBackfill(ctx, opts)
		return err
	})
	return res, err
}

func (s *Store) runBackfill(ctx context.Context, opts BackfillOptions) (BackfillResult, error) {
	start := time.Now()
	if opts.Proposer == "" {
		opts.Proposer = "gcos"
	}
	res := BackfillResult{RunID: NewRunID("gov-backfill")}
	if err := s.startRun(ctx, res.RunID, ModeBackfill, "seeding"); err != nil {
		return res, err
	}
	err := s.backfill(ctx, opts, &res)
	if ferr := s.finishRun(context.WithoutCancel(ctx), res.RunID, runCounts{snapshot: res.SnapshotID, ruleset: res.RulesetVersion,
		scanned: int64(res.Groups), changed: res.RowsWritten, materialized: res.ObjectsMaterialized, retired: res.ObjectsRetired}, err); ferr != nil {
		err = errors.Join(err, ferr)
	}
	res.Elapsed = time.Since(start)
	return res, err
}

func (s *Store) backfill(ctx context.Context, opts BackfillOptions, res *BackfillResult) error {
	rs, proposed, err := s.rulesetForScan(ctx, opts.Proposer)
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
	snap, reused, err := s.captureOrReuse(ctx, CaptureOptions{Scope: SnapshotBackfill, RunID: res.RunID, RulesetVersion: rs.Version, Progress: opts.Progress})
	if err != nil {
		return err
	}
	res.SnapshotID, res.SnapshotReused, res.Births, res.Groups = snap.ID, reused, snap.Metrics.Totals.Births, len(snap.Groups)
	t0 := time.Now()
	return s.inTx(ctx, func(tx pgx.Tx) error {
		defer func() { s.logger.Debug("backfill: seeded", "elapsed", time.Since(t0)) }()
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.seed', 0))`); err != nil {
			return err
		}
		if err := lockCandidates(ctx, tx, rs.Version); err != nil {
			return err
		}
		if err := upsertGroups(ctx, tx, snap.Groups); err != nil {
			return err
		}
		ev, err := s.newEvaluator(ctx, tx, rs)
		if err != nil {
			return err
		}
		values := make([]candidateValues, 0, len(snap.Groups))
		gaps := map[string]bool{}
		for _, g := range snap.Groups {
			v, err := ev.evaluate(g, "")
			if err != nil {
				return fmt.Errorf("evaluate group %s: %w", g.Key, err)
			}
			if v.InputQuality == string(gcos.InputBirthOrRegistryMissing) && g.SourceRegistry != nil {
				gaps[*g.SourceRegistry] = true
			}
			values = append(values, v)
		}
		if res.RowsWritten, err = seedCandidates(ctx, tx, snap.ID, rs.Version, res.RunID, values); err != nil {
			return err
		}
		if err := linkAudit(ctx, tx, "governance_candidate_state", rs.Version, snap.AuditID, `source_snapshot_ref = $3`, snap.ID); err != nil {
			return err
		}
		for coll := range gaps {
			res.InventoryGaps = append(res.InventoryGaps, coll)
		}
		sort.Strings(res.InventoryGaps)
		for _, coll := range res.InventoryGaps {
			if reused {
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
			if _, err := raiseFinding(ctx, tx, gcos.Finding{Type: gcos.IssueBackfillInventoryGap, Subject: coll, RunID: res.RunID, RulesetVersion: rs.Version,
				Evidence: map[string]any{"collection_name": coll, "reason": "births exist but the collection (or its class) is missing from its registry", "snapshot_id": snap.ID}}); err != nil {
				return err
			}
		}
		s.logger.Debug("backfill: groups seeded", "rows", res.RowsWritten, "elapsed", time.Since(t0))
		mat, ret, err := s.materializeObjects(ctx, tx, ev, snap, res.RunID)
		if err != nil {
			return err
		}
		res.ObjectsMaterialized, res.ObjectsRetired = mat, ret
		res.CursorsAtHorizon, err = startCursorsAtHorizon(ctx, tx, sources, horizon, res.RunID)
		if err != nil || !slices.Contains(res.CursorsAtHorizon, BirthTailSource(s.cfg.SourceBinding).Name) {
			return err
		}
		return s.keepSeedCounts(ctx, tx, snap)
	})
}

// captureOrReuse captures a snapshot unless the previous snapshot of the scope is identical, in which case that
// one is returned (a re-run over unchanged sources writes no new row).
func (s *Store) captureOrReuse(ctx context.Context, opts CaptureOptions) (Snapshot, bool, error) {
	opts.reuseUnchanged = true
	snap, err := s.CaptureSnapshot(ctx, opts)
	return snap, snap.reused, err
}

type runCounts struct {
	snapshot                                         int64
	ruleset                                          string
	scanned, dirtied, changed, materialized, retired int64
}

func (s *Store) startRun(ctx context.Context, runID, mode, phase string) error {
	var role *string
	var epoch *int64
	if l := leaseOf(ctx); l != nil {
		role, epoch = &l.Role.Name, &l.Epoch
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO candidate_scan_run (run_id, mode, phase, lease_role, lease_epoch) VALUES ($1, $2, $3, $4, $5)`,
			runID, mode, phase, role, epoch)
		return err
	})
	if err != nil {
		return fmt.Errorf("record run %s: %w", runID, err)
	}
	return nil
}

// finishRun records how a run ended. Only a running run ends: one a successor of its role marked abandoned stays
// so (ErrLeaseLost), and a fenced run whose lease is gone cannot record success either.
func (s *Store) finishRun(ctx context.Context, runID string, c runCounts, runErr error) error {
	status, msg := "succeeded", (*string)(nil)
	if runErr != nil {
		status = "failed"
		m := runErr.Error()
		msg = &m
	}
	var snap *int64
	if c.snapshot != 0 {
		snap = &c.snapshot
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `
		UPDATE candidate_scan_run SET finished_at = now(), status = $2, error = $3, source_snapshot_ref = $4,
		    ruleset_version = nullif($5, ''), groups_scanned = $6, groups_dirtied = $7, verdict_changes = $8,
		    objects_materialized = $9, objects_retired = $10
		WHERE run_id = $1 AND status = 'running'`, runID, status, msg, snap, c.ruleset, c.scanned, c.dirtied, c.changed, c.materialized, c.retired)
		if err != nil || tag.RowsAffected() > 0 {
			return err
		}
		var was string
		if err := tx.QueryRow(ctx, `SELECT status FROM candidate_scan_run WHERE run_id = $1`, runID).Scan(&was); err != nil {
			return err
		}
		if was == "abandoned" {
			return fmt.Errorf("run %s was abandoned by a successor in its role: %w", runID, ErrLeaseLost)
		}
		if runErr == nil {
			return fmt.Errorf("run %s is %s, not running", runID, was)
		}
		return nil // a failed tick already recorded the failure
	})
	if err != nil {
		return fmt.Errorf("finish run %s: %w", runID, err)
	}
	return nil
}
