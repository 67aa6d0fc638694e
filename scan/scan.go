package scan

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/oracle"
	"gcos/postgres"
)

// Scheduler runs the scan modes.
type Scheduler struct {
	Stage  *Stage
	Config gcos.ScanConfig
	Logger *slog.Logger
	// Modes selects which loops Run starts (default: all three).
	Modes []string
}

func (s *Scheduler) logger() *slog.Logger {
	if s.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return s.Logger.With("system", "scan")
}

// Run runs the selected loops until ctx is cancelled.
func (s *Scheduler) Run(ctx context.Context) error {
	modes := s.Modes
	if len(modes) == 0 {
		modes = []string{postgres.ModeEvent, postgres.ModeIncremental, postgres.ModeFullAudit}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(modes))
	for _, m := range modes {
		var loop func(context.Context) error
		switch m {
		case postgres.ModeEvent:
			loop = s.eventLoop
		case postgres.ModeIncremental:
			loop = s.incrementalLoop
		case postgres.ModeFullAudit:
			loop = s.auditLoop
		default:
			return gcos.Errorf(gcos.EINVALID, "scan mode %s is not one of event, incremental, full_audit", gcos.Quote(m))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := loop(ctx); err != nil && !errors.Is(err, context.Canceled) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	return errors.Join(drain(errs)...)
}

func drain(ch <-chan error) []error {
	var out []error
	for err := range ch {
		out = append(out, err)
	}
	return out
}

// Once runs one pass of a mode: event and incremental scan until the dirty set they see is drained; full runs the
// full audit.
func (s *Scheduler) Once(ctx context.Context, mode string) (Pass, error) {
	switch mode {
	case postgres.ModeEvent:
		return s.drain(ctx, postgres.ModeEvent, true, false)
	case postgres.ModeIncremental:
		return s.incremental(ctx, true)
	case postgres.ModeFullAudit, "full":
		res, err := s.Stage.FullAudit(ctx, nil)
		pass := Pass{Mode: postgres.ModeFullAudit, RunID: res.RunID, Scanned: res.Scanned, Audit: &res}
		if err != nil {
			return pass, err
		}
		rep, err := s.verify(ctx, res.RunID)
		pass.Verify = &rep
		return pass, err
	}
	return Pass{}, gcos.Errorf(gcos.EINVALID, "scan mode %s is not one of event, incremental, full", gcos.Quote(mode))
}

// incremental expires rows past stale_after and scans the whole dirty set; with detect it ends with the coverage
// detections over the estate (detect.go).
func (s *Scheduler) incremental(ctx context.Context, detect bool) (Pass, error) {
	if _, err := s.Stage.ExpireStale(ctx); err != nil {
		return Pass{}, err
	}
	p, err := s.drain(ctx, postgres.ModeIncremental, false, true)
	if err != nil || !detect {
		return p, err
	}
	det, err := s.Stage.Detect(ctx, p.RunID)
	p.Detections = &det
	return p, err
}

// Pass reports one pass.
type Pass struct {
	Mode           string         `json:"mode"`
	RunID          string         `json:"run_id"`
	Ticks          int            `json:"ticks"`
	Scanned        int            `json:"scanned"`
	VerdictChanges int            `json:"verdict_changes"`
	Failed         int            `json:"failed"`
	Storm          bool           `json:"storm"`
	Remaining      int64          `json:"remaining"`
	Audit          *AuditResult   `json:"audit,omitempty"`
	Detections     *DetectResult  `json:"detections,omitempty"` // an incremental pass's coverage detections
	Verify         *oracle.Report `json:"verify,omitempty"`     // the full audit's verification against the reference
	// Token is the consistency token after the pass: a gate question passing it as at_least reads its verdicts.
	Token string `json:"token,omitempty"`
}

// verify runs the full audit's verification (oracle.AuditVerify): a state that differs from a from-scratch
// evaluation raises verify_mismatch; an inconclusive proof (the intake behind its instant) raises and closes nothing.
func (s *Scheduler) verify(ctx context.Context, runID string) (oracle.Report, error) {
	cfg := s.Stage.cfg.Scan
	plan, err := oracle.PlanCover(ctx, s.Stage.core, runID, cfg.VerifySlices)
	if err != nil {
		return oracle.Report{}, fmt.Errorf("verify after the full audit: %w", err)
	}
	sample := gcos.CoverSample(cfg.VerifySample, plan.Slices)
	// The daemon keeps working while the proof reads: what was moving at a batch's instant (dirty, or written by a
	// transaction that committed after it, once the intake has handed off every source row committed before it) is
	// listed apart and raises nothing; everything settled must agree.
	rep, err := oracle.AuditVerify(ctx, s.Stage.core, runID, plan, oracle.VerifyOptions{Sample: sample, GateLimit: sample,
		BatchObjects: int64(cfg.VerifyBatchObjects),
		Seed:         uint64(time.Now().UnixNano()), InFlight: true, Settle: s.Stage.settle})
	if err != nil {
		return rep, fmt.Errorf("verify after the full audit: %w", err)
	}
	if rep.Inconclusive {
		s.logger().Warn("full audit: the proof is inconclusive: the intake had not handed off what its instant held, so no difference is judged settled and the next audit proves the slice again",
			"run_id", runID, "slice", plan.Slice, "slices", plan.Slices, "batches", rep.Batches, "in_flight", len(rep.InFlight),
			"mismatches", len(rep.Mismatches), "reason", rep.NotHandedOff)
	} else {
		s.logger().Info("full audit: proved its slice of the cover against a from-scratch evaluation", "run_id", runID,
			"slice", plan.Slice, "slices", plan.Slices, "collections", len(plan.Collections), "scanned_since", len(plan.Scanned), "batches", rep.Batches,
			"groups", rep.Groups, "objects", rep.Objects, "gate_checks", rep.GateChecks, "mismatches", len(rep.Mismatches), "in_flight", len(rep.InFlight),
			"elapsed", time.Duration(rep.Elapsed*float64(time.Second)).Round(time.Millisecond))
	}
	if !rep.Settled() {
		s.logger().Warn("full audit: the incremental state differs from a from-scratch evaluation (gcos verify lists it)",
			"run_id", runID, "mismatches", len(rep.Mismatches), "first", rep.Mismatches[0].String())
	}
	return rep, nil
}

// drain runs ticks of one run until a tick claims nothing (or only failures remain).
func (s *Scheduler) drain(ctx context.Context, mode string, debounce, expired bool) (Pass, error) {
	p := Pass{Mode: mode}
	var dirty *int64 // the dirty set as the previous tick left it: the next tick's storm throttle reads it
	for {
		res, err := s.Stage.ScanTick(ctx, ScanOptions{Mode: mode, RunID: p.RunID, Debounce: debounce, Expired: expired, dirty: dirty})
		if err != nil {
			return p, err
		}
		dirty = &res.dirty
		if p.RunID == "" {
			p.RunID = res.RunID
		}
		p.Ticks++
		p.Scanned += res.Scanned + res.Seeded
		p.VerdictChanges += res.VerdictChanges
		p.Failed += res.Failed
		p.Storm = p.Storm || res.Storm
		p.Remaining = res.Remaining
		if res.Claimed == 0 || res.Scanned+res.Seeded == 0 {
			return p, nil
		}
		if ctx.Err() != nil {
			return p, ctx.Err()
		}
	}
}

func (s *Scheduler) tick(ctx context.Context, name, status string) {
	if err := s.Stage.core.Heartbeat(ctx, "gcos.scan."+name, "scan", status); err != nil && ctx.Err() == nil {
		// Debug: a heartbeat fails with the database, and the loop's own outage log already says so.
		s.logger().Debug("heartbeat", "worker", name, "err", err)
	}
}

// eventLoop wakes on a dirty mark (or after the poll interval) and scans groups whose coalesce window has passed.
func (s *Scheduler) eventLoop(ctx context.Context) error {
	window := s.Config.CoalesceWindow.Duration()
	poll := max(window, 50*time.Millisecond)
	listener := s.Stage.core.ListenDirty()
	defer listener.Close()
	outage := s.outage("event scan", poll)
	for ctx.Err() == nil {
		p, err := s.drain(ctx, postgres.ModeEvent, true, false)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.tick(ctx, postgres.ModeEvent, "error")
			sleep(ctx, outage.Failed(err))
			continue
		}
		s.tick(ctx, postgres.ModeEvent, "ok")
		if p.Scanned > 0 {
			s.logger().Debug("event scan", "run_id", p.RunID, "scanned", p.Scanned, "remaining", p.Remaining)
		}
		// What is left is inside its coalesce window (claimable within one window) or waiting out a retry backoff;
		// a group not re-scanned within the window is claimed as soon as its mark arrives (claimDirtySQL).
		wait := poll * 20
		if p.Remaining > 0 {
			wait = window
		}
		if !listener.Listening() {
			wait = min(wait, poll) // nothing wakes it: polling alone finds the marks
		}
		if _, err := listener.Wait(ctx, wait); err != nil && ctx.Err() == nil {
			sleep(ctx, outage.Failed(fmt.Errorf("wait for dirty marks: %w", err)))
		} else {
			outage.Succeeded()
		}
	}
	return ctx.Err()
}

// incrementalLoop expires rows past stale_after and scans the whole dirty set every interval.
func (s *Scheduler) incrementalLoop(ctx context.Context) error {
	interval := s.Config.IncrementalInterval.Duration()
	outage := s.outage("incremental scan", interval)
	// The detection pass runs once every scan.detect_interval, and at every pass while the last one left writes for
	// the next.
	var detected time.Time
	more := false
	for ctx.Err() == nil {
		detect := more || time.Since(detected) >= s.Config.DetectInterval.Duration()
		p, err := s.incremental(ctx, detect)
		if err == nil && detect {
			detected = time.Now()
			more = p.Detections != nil && p.Detections.Left+p.Detections.Deferred > 0
		}
		wait := interval
		switch {
		case err != nil && ctx.Err() == nil:
			s.tick(ctx, postgres.ModeIncremental, "error")
			wait = max(interval, outage.Failed(err))
		case err == nil:
			outage.Succeeded()
			s.tick(ctx, postgres.ModeIncremental, "ok")
			if p.Scanned > 0 || p.Storm {
				s.logger().Info("incremental scan", "run_id", p.RunID, "scanned", p.Scanned, "verdict_changes", p.VerdictChanges, "storm", p.Storm, "remaining", p.Remaining)
			}
			res, err := s.Stage.maintainVerdictChanges(ctx, s.Config.VerdictChangesKeep.Duration(), s.Config.VerdictChangesPartition.Duration())
			switch {
			case err != nil && ctx.Err() == nil:
				s.logger().Warn("maintain the verdict change log", "err", err)
			case res.Deferred:
				s.logger().Debug("the verdict change log's maintenance waits for its lock until the next tick")
			}
		}
		sleep(ctx, wait)
	}
	return ctx.Err()
}

// auditLoop runs the full audit whenever the last completed one is older than the interval, in whichever process
// takes the audit role first (postgres.Stage.FullAuditIfDue). It looks every third of the role's lease TTL, so a
// holder killed mid-audit is succeeded within about one TTL plus that.
func (s *Scheduler) auditLoop(ctx context.Context) error {
	interval := s.Config.FullAuditInterval.Duration()
	every := min(interval, max(s.Stage.cfg.LeaseTTL.Duration()/3, 100*time.Millisecond))
	outage := s.outage("full audit", every)
	for ctx.Err() == nil {
		res, ran, err := s.Stage.FullAuditIfDue(ctx, interval, nil)
		wait := every
		switch {
		case ctx.Err() != nil:
		case gcos.ErrorCode(err) == gcos.ECONFLICT:
			// Another process holds the audit role.
			outage.Succeeded()
		case err != nil:
			s.tick(ctx, postgres.ModeFullAudit, "error")
			wait = max(every, outage.Failed(err))
		case !ran:
			outage.Succeeded()
			s.tick(ctx, postgres.ModeFullAudit, "idle")
		default:
			outage.Succeeded()
			s.tick(ctx, postgres.ModeFullAudit, "ok")
			s.logger().Info("full audit", "run_id", res.RunID, "snapshot", res.SnapshotID, "changed_groups", res.ChangedGroups,
				"lost_signals", len(res.LostSignals), "nondeterministic", len(res.Nondeterministic), "count_drift", res.CountDrift, "kept_count_drift", len(res.KeptCountDrift),
				"expired", res.Expired, "scanned", res.Scanned, "invariant_closes", res.Ledger.Closes, "elapsed", res.Elapsed)
			if _, err := s.verify(ctx, res.RunID); err != nil && ctx.Err() == nil { // verify logs what it proved
				s.logger().Error("full audit", "err", err)
			}
		}
		sleep(ctx, wait)
	}
	return ctx.Err()
}

// outage is a loop's outage log: back off from base, say so once per state change.
func (s *Scheduler) outage(what string, base time.Duration) *gcos.OutageLog {
	return gcos.NewOutageLog(what, base, s.Stage.cfg.Outage, s.logger())
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// maintainVerdictChanges makes the verdict change log's partitions ahead and drops those older than keep
// (scan.verdict_changes_keep): the log the change routes and the gate's view read is a window, not a history. The
// log's horizon moves just past the newest transaction dropped, so that a feed cursor that may have missed a dropped
// change is refused, never silently short (postgres.Store.ChangesAfter). A maintenance that drops nothing leaves the
// horizon: a cursor issued while the log was empty (a dashboard opened before the first change) stays good.
func (s *Stage) maintainVerdictChanges(ctx context.Context, keep, width time.Duration) (postgres.LogMaintained, error) {
	var res postgres.LogMaintained
	err := pgx.BeginFunc(ctx, s.core.Pool(), func(tx pgx.Tx) error {
		var err error
		res, err = postgres.MaintainVerdictChangesTx(ctx, tx, keep, width)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("maintain the verdict change log: %w", err)
	}
	return res, nil
}
