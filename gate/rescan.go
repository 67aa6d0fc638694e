package gate

import (
	"context"
	"errors"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"
)

// The gate's synchronous re-scan (SPEC §12): a high-risk object that blocks only because its group's verdict is
// stale (dirty, expired) is re-evaluated for that one group within gate.rescan_deadline and answered from the fresh
// verdict. The scan stage does the re-scan (a stage never imports another): the daemon hands gate.New its function.

// Rescanner re-scans the named groups now when they are dirty or past stale_after, committing their verdicts as
// any scan does (scan.Stage.RescanGroups).
type Rescanner func(ctx context.Context, groups []string) error

// gateRescan runs the gate's re-scans: one flight per set of groups however many callers wait for it, at most
// gate.rescan_concurrency at once.
type gateRescan struct {
	fn      Rescanner
	slots   chan struct{}
	flights singleflight.Group
}

var errRescanBusy = errors.New("the gate's re-scans are all busy")

// rescanNow re-scans groups, waiting at most gate.rescan_deadline, and reports whether the re-scan committed in
// time (a read now sees its verdicts). A re-scan the caller stops waiting for runs on, within gate.timeout, for
// the callers after it; one that finds every slot busy does not run.
func (g *Gate) rescanNow(ctx context.Context, groups []string) bool {
	r, wait := g.rescan, g.cfg.Gate.RescanDeadline.Duration()
	if r == nil || wait <= 0 || len(groups) == 0 {
		return false
	}
	ch := r.flights.DoChan(strings.Join(groups, "\x00"), func() (any, error) {
		select {
		case r.slots <- struct{}{}:
		default:
			return nil, errRescanBusy
		}
		defer func() { <-r.slots }()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.cfg.Gate.Timeout.Duration())
		defer cancel()
		return nil, r.fn(ctx, groups)
	})
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	select {
	case res := <-ch:
		if res.Err != nil && !errors.Is(res.Err, errRescanBusy) {
			// The scan records its own failures (the run ledger, the group's retry backoff); the answer blocks.
			g.logger.Debug("gate: synchronous re-scan", "groups", groups, "err", res.Err)
		}
		return res.Err == nil
	case <-deadline.C:
		return false
	case <-ctx.Done():
		return false
	}
}
