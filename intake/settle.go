package intake

import (
	"context"
	"fmt"
	"strings"
	"time"

	"gcos/postgres"
)

// HandedOff returns once every source row committed before at has been handed off by the intake: each tail's
// oldest unread row is newer than at. A row is stamped inside its writing transaction, before that commits, so a
// row committed before at is stamped before it too. It polls within timeout. The intake that does the handing off
// may run in another process: when no tail's position moves for idle while rows wait, none is running and HandedOff
// gives up at once instead of at the timeout. The error names the sources still waiting and their oldest rows.
//
// This is the cut every live proof takes (SPEC §13): a source row committed before its instant but not handed off
// yet is in flight, never a lost signal, a count drift or a mismatch.
func (s *Stage) HandedOff(ctx context.Context, sources []postgres.TailSource, at time.Time, timeout, idle time.Duration) error {
	if len(sources) == 0 {
		sources = postgres.DefaultTailSources(s.cfg.Binding)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(settlePoll)
	defer tick.Stop()
	var positions string
	moved := time.Now()
	for {
		var waiting, now []string
		for _, src := range sources {
			lag, err := s.CheckTailLag(ctx, src, s.cfg.Intake)
			if err != nil {
				if ctx.Err() != nil {
					break // the deadline's message below says more than the cancelled read
				}
				return fmt.Errorf("handed off: %w", err)
			}
			now = append(now, lag.Position)
			if lag.OldestUnreadAt != nil && !lag.OldestUnreadAt.After(at) {
				waiting = append(waiting, fmt.Sprintf("%s (oldest unread row %s)", src.Name, lag.OldestUnreadAt.UTC().Format(time.RFC3339Nano)))
			}
		}
		if len(waiting) == 0 && ctx.Err() == nil {
			return nil
		}
		if p := strings.Join(now, ","); p != positions {
			positions, moved = p, time.Now()
		}
		if idle > 0 && time.Since(moved) > idle {
			return fmt.Errorf("rows committed before %s are not handed off and no intake moved for %s: %s (is the daemon running?)",
				at.UTC().Format(time.RFC3339Nano), idle, strings.Join(waiting, ", "))
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return fmt.Errorf("rows committed before %s were not handed off within %s: %s",
					at.UTC().Format(time.RFC3339Nano), timeout, strings.Join(waiting, ", "))
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// settlePoll is how often HandedOff looks at the tails' positions.
const settlePoll = 100 * time.Millisecond
