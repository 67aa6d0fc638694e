package postgres

// Scan runs: each backfill, scan tick and audit is one candidate_scan_run row, opened and closed here.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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

// RulesetForScan returns the ruleset verdicts are computed under: the active one, else a draft computed from the
// current registries. It also returns the computed draft when it differs from the active one, so the operator
// can see that registries moved and a new version awaits approval.
func (s *Store) RulesetForScan(ctx context.Context, proposer string) (RulesetRow, string, error) {
	computed, _, err := s.ComputeRuleset(ctx, proposer)
	if err != nil {
		return RulesetRow{}, "", err
	}
	active, err := s.activeRuleset(ctx)
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

// RunCounts is what a run did, recorded when it finishes.
type RunCounts struct {
	Snapshot                                         int64
	Ruleset                                          string
	Scanned, Dirtied, Changed, Materialized, Retired int64
}

// StartRun records the start of run runID (candidate_scan_run), under the lease the context carries, if any.
func (s *Store) StartRun(ctx context.Context, runID, mode, phase string) error {
	var role *string
	var epoch *int64
	if l := leaseOf(ctx); l != nil {
		role, epoch = &l.Role.Name, &l.Epoch
	}
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO candidate_scan_run (run_id, mode, phase, lease_role, lease_epoch) VALUES ($1, $2, $3, $4, $5)`,
			runID, mode, phase, role, epoch)
		return err
	})
	if err != nil {
		return fmt.Errorf("record run %s: %w", runID, err)
	}
	return nil
}

// FinishRun records how a run ended. Only a running run ends: one a successor of its role marked abandoned stays
// so (ErrLeaseLost), and a fenced run whose lease is gone cannot record success either.
func (s *Store) FinishRun(ctx context.Context, runID string, c RunCounts, runErr error) error {
	status, msg := RunSucceeded, (*string)(nil)
	if runErr != nil {
		status = RunFailed
		m := runErr.Error()
		msg = &m
	}
	var snap *int64
	if c.Snapshot != 0 {
		snap = &c.Snapshot
	}
	var mode string
	var took float64
	err := s.InTx(ctx, func(tx pgx.Tx) error {
		// clock_timestamp(): the run ends now, not when this transaction began.
		err := tx.QueryRow(ctx, `
		UPDATE candidate_scan_run SET finished_at = clock_timestamp(), status = $2, error = $3, source_snapshot_ref = $4,
		    ruleset_version = nullif($5, ''), groups_scanned = $6, groups_dirtied = $7, verdict_changes = $8,
		    objects_materialized = $9, objects_retired = $10
		WHERE run_id = $1 AND status = 'running'
		RETURNING mode, extract(epoch FROM finished_at - started_at)::float8`, runID, status, msg, snap, c.Ruleset, c.Scanned, c.Dirtied,
			c.Changed, c.Materialized, c.Retired).Scan(&mode, &took)
		if err == nil && mode == ModeBackfill && runErr == nil && c.Changed+c.Materialized+c.Retired == 0 {
			return nil // a backfill that wrote nothing (a re-run over unchanged sources) leaves no trace but its run row
		}
		if err == nil {
			return RecordRunTx(ctx, tx, RunSummary{RunID: runID, Mode: mode, Status: status, Ruleset: c.Ruleset,
				Snapshot: c.Snapshot, Scanned: c.Scanned, Changed: c.Changed, Objects: c.Materialized, Retired: c.Retired})
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		mode = ""
		var was string
		if err := tx.QueryRow(ctx, `SELECT status FROM candidate_scan_run WHERE run_id = $1`, runID).Scan(&was); err != nil {
			return err
		}
		if was == RunAbandoned {
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
	if mode != "" {
		s.ObserveRun(mode, status, time.Duration(took*float64(time.Second)))
	}
	return nil
}

// RunSummary is what a finished run leaves in the audit channel and announces.
type RunSummary struct {
	RunID, Mode, Status, Ruleset               string
	Snapshot                                   int64
	Scanned, Changed, Failed, Objects, Retired int64
}

// runEventTypes are the announcements of a finished run, by mode: the completion events of the streams it served
// (doc 41 §41.4). A scan judges the groups' candidacy and their coverage, so it completes both streams' scans.
var runEventTypes = map[string][]string{
	ModeEvent:       {"governance.candidate.scan_completed", "governance.coverage.scan_completed"},
	ModeIncremental: {"governance.candidate.scan_completed", "governance.coverage.scan_completed"},
	ModeFullAudit:   {"governance.coverage.audit_completed"},
	ModeBackfill:    {"governance.backfill.sweep_completed"},
}

// runFailedEventTypes are the announcements of a run that did not succeed, beside its completion: a backfill is one
// transaction, so a failed one covered nothing of the inventory (doc 41 §41.4 backfill.incomplete).
var runFailedEventTypes = map[string][]string{
	ModeBackfill: {EventBackfillIncomplete},
}

// EventBackfillIncomplete announces a backfill run that ended without covering the inventory.
const EventBackfillIncomplete = "governance.backfill.incomplete"

// RecordRunTx writes a finished run's audit row (registry_changelog, entity governance_scan_run, action the run's
// status) and announces it, inside the transaction that finishes the run. The announcement's subject is the mode,
// so the cooldown spaces out the completions of a busy loop; the audit row is one per run.
func RecordRunTx(ctx context.Context, tx pgx.Tx, r RunSummary) error {
	detail := map[string]any{"mode": r.Mode, "status": r.Status, "ruleset_version": r.Ruleset, "groups": r.Scanned,
		"verdict_changes": r.Changed, "failed": r.Failed, "objects": r.Objects, "retired": r.Retired}
	if r.Snapshot != 0 {
		detail["source_snapshot_ref"] = r.Snapshot
	}
	level := "info"
	if r.Status != RunSucceeded {
		level = "warning"
	}
	auditID, err := Audit(ctx, tx, AuditEntry{EntityType: "governance_scan_run", EntityCode: r.RunID, Action: r.Status,
		AlertLevel: level, Detail: detail})
	if err != nil {
		return err
	}
	payload := map[string]any{"run_id": r.RunID, "mode": r.Mode, "status": r.Status, "groups": r.Scanned,
		"count": r.Changed, "failed": r.Failed, "objects": r.Objects, "audit_id": auditID}
	if r.Ruleset != "" {
		payload["ruleset_version"] = r.Ruleset
	}
	if r.Snapshot != 0 {
		payload["source_snapshot_ref"] = r.Snapshot
	}
	severity := ""
	if r.Status != RunSucceeded {
		severity = "warning"
	}
	types := runEventTypes[r.Mode]
	if r.Status != RunSucceeded {
		types = append(slices.Clone(types), runFailedEventTypes[r.Mode]...)
	}
	for _, eventType := range types {
		if err := AnnounceTx(ctx, tx, Emit{EventType: eventType, SubjectTable: "candidate_scan_run", SubjectRef: r.Mode,
			CollectionName: "candidate_scan_run", EntityCode: r.RunID, CorrelationID: "run:" + r.RunID,
			Severity: severity, Payload: payload}); err != nil {
			return err
		}
	}
	return nil
}

// Scan modes (candidate_scan_run.mode).
const (
	ModeEvent       = "event"
	ModeIncremental = "incremental"
	ModeFullAudit   = "full_audit"
	ModeBackfill    = "backfill"
)

// ScanModes lists every scan mode.
var ScanModes = []string{ModeBackfill, ModeEvent, ModeIncremental, ModeFullAudit}

// Run phases (candidate_scan_run.phase): what a run of each mode is doing.
const (
	PhaseSeeding     = "seeding"     // a backfill
	PhaseReconciling = "reconciling" // kept by the schema for a reconciling pass; no run takes it today
	PhaseScanning    = "scanning"    // an event or incremental scan
	PhaseAuditing    = "auditing"    // a full audit
)

// RunPhases lists every run phase.
var RunPhases = []string{PhaseSeeding, PhaseReconciling, PhaseScanning, PhaseAuditing}

// Run statuses (candidate_scan_run.status).
const (
	RunRunning   = "running"
	RunSucceeded = "succeeded"
	RunFailed    = "failed"
	RunAbandoned = "abandoned" // its holder lost the role before finishing
)

// RunStatuses lists every run status.
var RunStatuses = []string{RunRunning, RunSucceeded, RunFailed, RunAbandoned}

// NotifyChannel is the LISTEN/NOTIFY channel a dirty mark wakes event-driven scanners on. Polling remains the
// source of truth: a lost notification only delays a scan.
const NotifyChannel = "gcos_dirty"
