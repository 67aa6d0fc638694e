package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// PruneResult reports a prune.
type PruneResult struct {
	Removed []int64 `json:"removed"`
	Kept    int     `json:"kept"`
	DryRun  bool    `json:"dry_run"`
}

// pruneCandidatesSQL selects GCOS snapshots no retention rule keeps: not referenced by any candidate row, not the
// latest of its scope, and not among the last N full-audit cycles (backfill and audit captures).
const pruneCandidatesSQL = `
WITH gov AS (
    SELECT id, scope FROM evolution_snapshots WHERE scope LIKE 'governance.%'
), keep AS (
    SELECT source_snapshot_ref AS id FROM governance_candidate_state
    UNION SELECT source_snapshot_ref FROM governance_candidate_object
    UNION SELECT max(id) FROM gov GROUP BY scope
    UNION (SELECT id FROM gov WHERE scope IN ('governance.audit', 'governance.backfill') ORDER BY id DESC LIMIT $1)
)
SELECT id, (SELECT count(*) FROM gov) FROM gov WHERE id NOT IN (SELECT id FROM keep WHERE id IS NOT NULL) ORDER BY id`

// PruneSnapshots removes GCOS snapshots beyond the retention policy (SPEC §5). Snapshots of other scopes are never
// touched. The removal is summarised in one audit row, never silent. It runs as the holder of RolePrune (ECONFLICT
// while another process holds it).
func (s *Store) PruneSnapshots(ctx context.Context, dryRun bool) (res PruneResult, err error) {
	err = s.AsRole(ctx, RolePrune, func(ctx context.Context) error {
		var err error
		res, err = s.pruneSnapshots(ctx, dryRun)
		return err
	})
	return res, err
}

func (s *Store) pruneSnapshots(ctx context.Context, dryRun bool) (PruneResult, error) {
	res := PruneResult{DryRun: dryRun, Removed: []int64{}}
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.snapshot.prune', 0))`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, pruneCandidatesSQL, s.cfg.Snapshot.RetentionCycles)
		if err != nil {
			return fmt.Errorf("select prunable snapshots: %w", err)
		}
		total := 0
		for rows.Next() {
			var id int64
			if err := rows.Scan(&id, &total); err != nil {
				rows.Close()
				return err
			}
			res.Removed = append(res.Removed, id)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if total == 0 {
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM evolution_snapshots WHERE scope LIKE 'governance.%'`).Scan(&total); err != nil {
				return err
			}
		}
		res.Kept = total - len(res.Removed)
		if dryRun || len(res.Removed) == 0 {
			return nil
		}
		if _, err := tx.Exec(ctx, `DELETE FROM evolution_snapshots WHERE id = ANY($1) AND scope LIKE 'governance.%'`, res.Removed); err != nil {
			return fmt.Errorf("prune snapshots: %w", err)
		}
		auditID, err := Audit(ctx, tx, AuditEntry{EntityType: "governance_snapshot", EntityCode: "prune", Action: "prune",
			Detail: map[string]any{"removed": len(res.Removed), "kept": res.Kept, "retention_cycles": s.cfg.Snapshot.RetentionCycles,
				"first_removed": res.Removed[0], "last_removed": res.Removed[len(res.Removed)-1]}})
		if err != nil {
			return err
		}
		return AnnounceTx(ctx, tx, Emit{EventType: EventSnapshotPruned, SubjectTable: "evolution_snapshots",
			SubjectRef: "prune", CollectionName: "evolution_snapshots", EntityCode: "prune",
			CorrelationID: fmt.Sprintf("prune:%d", auditID),
			Payload:       map[string]any{"pruned": len(res.Removed), "count": res.Kept, "audit_id": auditID}})
	})
	if err != nil {
		return PruneResult{}, err
	}
	return res, nil
}
