// Package wait is the one way GCOS's tests wait: they poll a condition until a deadline, never sleep for a
// guessed duration and never assert how long something took.
package wait

import (
	"context"
	"testing"
	"time"
)

// Interval is how often a condition is polled.
const Interval = 10 * time.Millisecond

// Until polls cond every Interval until it holds (true) or within has passed (false). A caller that fails with
// more detail than what (the last error, the last answer) uses it; For fails for the caller.
func Until(within time.Duration, cond func() bool) bool {
	return UntilCtx(context.Background(), within, cond)
}

// UntilCtx is Until that also gives up when ctx ends.
func UntilCtx(ctx context.Context, within time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(within)
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return cond()
		case <-t.C:
		}
	}
}

// For polls cond until it holds, failing the test naming what when within passes first.
func For(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(within, cond) {
		t.Fatalf("%s: not within %s", what, within)
	}
}

// Pass lets d pass on the clock, for a behaviour keyed to elapsed time the test then observes (a tail's guard
// window, a lease's TTL, a lag threshold, an outage's length): it polls the clock like any condition, and ends
// early when ctx does.
func Pass(ctx context.Context, d time.Duration) {
	until := time.Now().Add(d)
	UntilCtx(ctx, d+time.Second, func() bool { return !time.Now().Before(until) })
}

// Pace spaces the steps of a load generator or a fault injector (a writer's next row, a random kill's moment),
// stopping early when ctx ends; it is not a wait for a condition.
func Pace(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
