package intake

// The silent-gap monitor (SPEC §9.3, doc 32 §1 boundary 5, doc 41 §41.6): every GCOS worker ticks its row of
// queue_heartbeat while it runs — also when it has nothing to do — so a worker that is quiet keeps a fresh tick and
// a worker that is dead (killed, hung, cut off from the database) does not. CheckSilence reads the ticks by the
// database clock and raises handoff_silent_gap (an intake executor) or candidate_scan_lag (a scan executor, or a
// dirty set whose oldest mark has waited too long), and resolves them once the ticks are fresh again.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// Executor name prefixes the monitor watches, and the subject of the dirty-set lag.
const (
	monitorIntakePrefix = postgres.IntakeExecutorPrefix // gcos.intake.<source>
	monitorScanPrefix   = postgres.ScanExecutorPrefix   // gcos.scan.<mode>
	// DirtySetSubject is the subject of the candidate_scan_lag finding about the oldest dirty mark.
	DirtySetSubject = "dirty_set"
)

// Executor states in a SilenceReport.
const (
	ExecutorAlive   = "alive"   // ticked within its limit: running, whether busy or quiet
	ExecutorDead    = "dead"    // its last tick is older than its limit and it never said it stopped
	ExecutorStopped = "stopped" // it stopped cleanly (last status "stopped") longer ago than its limit
	ExecutorNever   = "never"   // the row exists but was never ticked
)

// ExecutorSilence is one watched executor as the monitor saw it.
type ExecutorSilence struct {
	Name           string     `json:"executor_name"`
	Kind           string     `json:"executor_kind,omitempty"`
	Issue          string     `json:"issue_type"` // the finding a silence raises
	LastTickAt     *time.Time `json:"last_tick_at"`
	AgeSeconds     *float64   `json:"age_seconds"`   // by the database clock
	LimitSeconds   float64    `json:"limit_seconds"` // silent_gap_threshold + the executor's own tick cadence
	LastTickStatus string     `json:"last_tick_status,omitempty"`
	State          string     `json:"state"` // ExecutorAlive, ExecutorDead, ExecutorStopped or ExecutorNever
	Silent         bool       `json:"silent"`
}

// DirtySetLag is the age of the oldest pending dirty mark (v_candidate_effective; failed re-evaluations are
// excluded: they wait on their own backoff and are reported as failed groups).
type DirtySetLag struct {
	DirtyGroups   int64      `json:"dirty_groups"`
	OldestDirtyAt *time.Time `json:"oldest_dirty_at"`
	AgeSeconds    float64    `json:"age_seconds"`
	LimitSeconds  float64    `json:"limit_seconds"`
	Lagging       bool       `json:"lagging"`
}

// SilenceReport is what one CheckSilence saw and did.
type SilenceReport struct {
	At               time.Time         `json:"at"` // the database clock
	ThresholdSeconds float64           `json:"threshold_seconds"`
	Executors        []ExecutorSilence `json:"executors"`
	DirtySet         DirtySetLag       `json:"dirty_set"`
	Raised           []string          `json:"raised"`   // coalesce keys raised (or raised again) by this check
	Resolved         []string          `json:"resolved"` // coalesce keys closed by this check
}

// Silent reports whether anything was silent or lagging.
func (r SilenceReport) Silent() bool { return len(r.Raised) > 0 }

const monitorExecutorsSQL = `
SELECT executor_name, coalesce(executor_kind, ''), last_tick_at, extract(epoch FROM now() - last_tick_at)::float8,
       coalesce(last_tick_status, '')
FROM queue_heartbeat
WHERE (starts_with(executor_name, $1) OR starts_with(executor_name, $2))
  AND coalesce(executor_kind, '') <> 'lease' AND executor_name NOT LIKE '%.lease'
ORDER BY executor_name`

const monitorDirtySQL = `
SELECT count(*), min(dirtied_at), coalesce(extract(epoch FROM now() - min(dirtied_at)), 0)::float8
FROM v_candidate_effective
WHERE dirty AND recompute_status <> 'failed'`

// CheckSilence is the silent-gap monitor. For every queue_heartbeat row of an intake executor (gcos.intake.*) or a
// scan executor (gcos.scan.*; lease rows excluded) whose last tick is older than intake.silent_gap_threshold plus
// the executor's own tick cadence, it raises handoff_silent_gap or candidate_scan_lag, the executor as subject, with
// the last tick, its age and whether the executor stopped cleanly or went dead; a fresh tick resolves the finding.
// It also raises candidate_scan_lag (subject DirtySetSubject) when the oldest pending dirty mark has waited longer
// than the threshold, and resolves it when it has not. Ages are measured by the database clock. A worker that is
// merely quiet keeps ticking and is never reported.
func (s *Stage) CheckSilence(ctx context.Context) (SilenceReport, error) {
	threshold := s.core.SilenceThreshold()
	rep := SilenceReport{ThresholdSeconds: threshold.Seconds(), Executors: []ExecutorSilence{}, Raised: []string{},
		Resolved: []string{}}
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&rep.At); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, monitorExecutorsSQL, monitorIntakePrefix, monitorScanPrefix)
		if err != nil {
			return fmt.Errorf("read heartbeats: %w", err)
		}
		rep.Executors, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ExecutorSilence, error) {
			var e ExecutorSilence
			err := r.Scan(&e.Name, &e.Kind, &e.LastTickAt, &e.AgeSeconds, &e.LastTickStatus)
			return e, err
		})
		if err != nil {
			return fmt.Errorf("read heartbeats: %w", err)
		}
		for i := range rep.Executors {
			e := &rep.Executors[i]
			issue := gcos.IssueHandoffSilentGap
			if strings.HasPrefix(e.Name, monitorScanPrefix) {
				issue = gcos.IssueCandidateScanLag
			}
			e.Issue = string(issue)
			limit := s.core.SilenceLimit(e.Name)
			e.LimitSeconds = limit.Seconds()
			switch {
			case e.AgeSeconds == nil:
				e.State, e.Silent = ExecutorNever, true
			case *e.AgeSeconds <= limit.Seconds():
				e.State = ExecutorAlive
			case e.LastTickStatus == "stopped":
				e.State, e.Silent = ExecutorStopped, true
			default:
				e.State, e.Silent = ExecutorDead, true
			}
			if err := s.settle(ctx, tx, &rep, issue, e.Name, e.Silent, map[string]any{
				"executor": e.Name, "executor_kind": e.Kind, "state": e.State, "last_tick_at": e.LastTickAt,
				"age_seconds": e.AgeSeconds, "limit_seconds": e.LimitSeconds, "last_tick_status": e.LastTickStatus,
				"threshold_seconds": rep.ThresholdSeconds,
			}); err != nil {
				return err
			}
		}

		d := &rep.DirtySet
		d.LimitSeconds = threshold.Seconds()
		if err := tx.QueryRow(ctx, monitorDirtySQL).Scan(&d.DirtyGroups, &d.OldestDirtyAt, &d.AgeSeconds); err != nil {
			return fmt.Errorf("read dirty set: %w", err)
		}
		d.Lagging = d.OldestDirtyAt != nil && d.AgeSeconds > d.LimitSeconds
		return s.settle(ctx, tx, &rep, gcos.IssueCandidateScanLag, DirtySetSubject, d.Lagging, map[string]any{
			"subject": DirtySetSubject, "dirty_groups": d.DirtyGroups, "oldest_dirty_at": d.OldestDirtyAt,
			"age_seconds": d.AgeSeconds, "limit_seconds": d.LimitSeconds,
		})
	})
	if err != nil {
		return rep, fmt.Errorf("check silence: %w", err)
	}
	return rep, nil
}

// settle raises the finding of (issue, subject) while the condition holds and resolves it once it has cleared.
func (s *Stage) settle(ctx context.Context, tx pgx.Tx, rep *SilenceReport, issue gcos.IssueType, subject string, bad bool, evidence map[string]any) error {
	key := gcos.CoalesceKey(issue, subject)
	if bad {
		if _, err := postgres.RaiseFindingTx(ctx, tx, gcos.NewFinding(issue, subject, "", "", evidence)); err != nil {
			return err
		}
		rep.Raised = append(rep.Raised, key)
		return nil
	}
	closed, err := postgres.ResolveFindingTx(ctx, tx, issue, subject, "")
	if err != nil {
		return err
	}
	if closed {
		rep.Resolved = append(rep.Resolved, key)
	}
	return nil
}
