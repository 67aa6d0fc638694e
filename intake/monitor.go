package intake

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"gcos"
	"gcos/postgres"
)

// MonitorLease is the role lease that makes one process at a time run the silent-gap monitor.
const MonitorLease = "gcos.monitor.silence.lease"

// Monitor runs the silent-gap monitor (Stage.CheckSilence) periodically in whichever process holds
// MonitorLease, so that "quiet" (a worker ticking with nothing to do) and "dead" (no tick) differ: a dead worker
// cannot report itself, another process's monitor does. Worker.Run runs one; a daemon without an intake worker can
// run its own.
type Monitor struct {
	Stage  *Stage
	Config gcos.IntakeConfig // silent_gap_threshold and heartbeat_interval set the pace
	Logger *slog.Logger
	Owner  string // lease owner; default the store's (postgres.Store.Owner)

	silent map[string]bool // coalesce keys raised by the last check, to log transitions only
}

// Interval is how often the monitor checks: the heartbeat interval, at most half the silent-gap threshold.
func (m *Monitor) Interval() time.Duration {
	d := m.Config.HeartbeatInterval.Duration()
	if d <= 0 {
		d = 5 * time.Second
	}
	if t := m.Config.SilentGapThreshold.Duration(); t > 0 {
		d = min(d, t/2)
	}
	return max(d, 20*time.Millisecond)
}

func (m *Monitor) owner() string {
	if m.Owner != "" {
		return m.Owner
	}
	return m.Stage.core.Owner()
}

func (m *Monitor) logger() *slog.Logger {
	if m.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Logger.With("system", "intake", "subsystem", "monitor")
}

// Check runs one check (whoever holds the lease) and logs what became silent or was resolved.
func (m *Monitor) Check(ctx context.Context) (SilenceReport, error) {
	rep, err := m.Stage.CheckSilence(ctx)
	if err != nil {
		return rep, err
	}
	log := m.logger()
	now := map[string]bool{}
	for _, k := range rep.Raised {
		now[k] = true
		if !m.silent[k] {
			log.Warn("silent gap", "finding", k)
		}
	}
	for _, k := range rep.Resolved {
		log.Info("silent gap resolved", "finding", k)
	}
	for k := range m.silent {
		if !now[k] && !slices.Contains(rep.Resolved, k) {
			log.Info("silent gap cleared", "finding", k)
		}
	}
	m.silent = now
	return rep, nil
}

// Run checks every Interval (the first after one Interval) while this process holds the monitor lease, until ctx
// ends (then it returns nil and gives the lease up). Errors are logged and retried at the next interval.
func (m *Monitor) Run(ctx context.Context) error {
	if m.Stage == nil {
		return gcos.Errorf(gcos.EINVALID, "monitor: no store")
	}
	every := m.Interval()
	ttl := max(3*every, time.Second)
	owner := m.owner()
	log := m.logger()
	role := postgres.Role{Name: MonitorLease}
	var lease *postgres.Lease
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		_ = m.Stage.core.ReleaseLease(rctx, lease)
	}()
	outage := gcos.NewOutageLog("silent-gap monitor", every, m.Stage.cfg.Outage, log)
	wait := every
	for {
		// The first check waits one interval: a worker that lives shorter than that (a one-off pass) leaves the
		// watching to the long-running ones.
		if !sleep(ctx, wait) {
			return nil
		}
		wait = every
		l, err := m.Stage.core.TakeRole(ctx, role, owner, ttl)
		if err == nil {
			lease = l
		}
		held := err == nil && l != nil
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			wait = max(every, outage.Failed(fmt.Errorf("take the monitor role: %w", err)))
		case held:
			if _, err := m.Check(postgres.Fenced(ctx, l)); err != nil && ctx.Err() == nil {
				wait = max(every, outage.Failed(err))
			} else {
				outage.Succeeded()
			}
		default:
			outage.Succeeded()
		}
	}
}
