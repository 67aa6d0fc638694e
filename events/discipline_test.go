package events_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/events"
)

var t0 = time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)

func TestDecide(t *testing.T) {
	rule := events.Rule{Types: "governance.*", Cooldown: time.Minute, Ceiling: 2, Window: 10 * time.Minute}
	open := events.Window{Start: t0, End: t0.Add(10 * time.Minute), Emitted: 1}
	full := events.Window{Start: t0, End: t0.Add(10 * time.Minute), Emitted: 2, Held: 3}
	for _, tc := range []struct {
		name         string
		rule         events.Rule
		last         time.Time
		w            events.Window
		now          time.Time
		want         string
		wantWindow   events.Window
		wantClosed   *events.Window
		wantUntilSet bool
	}{
		{name: "no rule releases", rule: events.Rule{}, now: t0, want: events.Release},
		{name: "first announcement opens a window", rule: rule, now: t0, want: events.Release,
			wantWindow: events.Window{Start: t0, End: t0.Add(10 * time.Minute), Emitted: 1}},
		{name: "inside the cooldown waits", rule: rule, last: t0, w: open, now: t0.Add(30 * time.Second), want: events.Wait,
			wantWindow: open, wantUntilSet: true},
		{name: "the cooldown's end releases", rule: rule, last: t0, w: open, now: t0.Add(time.Minute), want: events.Release,
			wantWindow: events.Window{Start: t0, End: t0.Add(10 * time.Minute), Emitted: 2}},
		{name: "past the ceiling holds back", rule: rule, w: full, now: t0.Add(5 * time.Minute), want: events.Hold,
			wantWindow: events.Window{Start: t0, End: t0.Add(10 * time.Minute), Emitted: 2, Held: 4}},
		{name: "a new window closes the old one", rule: rule, w: full, now: t0.Add(10 * time.Minute), want: events.Release,
			wantWindow: events.Window{Start: t0.Add(10 * time.Minute), End: t0.Add(20 * time.Minute), Emitted: 1},
			wantClosed: &full},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := events.Decide(tc.rule, tc.last, tc.w, tc.now)
			if d.Outcome != tc.want || d.Window != tc.wantWindow || (d.Closed == nil) != (tc.wantClosed == nil) ||
				(d.Closed != nil && *d.Closed != *tc.wantClosed) || d.Until.IsZero() == tc.wantUntilSet {
				t.Fatalf("Decide = %+v (closed %v), want %s window %+v closed %v", d, d.Closed, tc.want, tc.wantWindow, tc.wantClosed)
			}
		})
	}
}

func TestDisciplineFromConfig(t *testing.T) {
	d := events.DisciplineFrom(gcos.DefaultConfig().Events)
	for _, tc := range []struct {
		eventType string
		cooldown  time.Duration
		ceiling   int
	}{
		{"governance.candidate.scan_completed", 5 * time.Minute, 0},
		{"governance.handoff.heartbeat", 5 * time.Minute, 0},
		{"governance.coverage.orphan", time.Minute, 200},
	} {
		r := d.RuleFor(tc.eventType)
		if r.Cooldown != tc.cooldown || r.Ceiling != tc.ceiling {
			t.Errorf("rule for %s = %+v, want cooldown %s ceiling %d", tc.eventType, r, tc.cooldown, tc.ceiling)
		}
	}
	if !d.IsDispute("governance.coverage.owner_dispute") || !d.IsDispute("governance.exception.unratified") ||
		d.IsDispute("governance.coverage.orphan") {
		t.Error("council types: owner disputes and unratified exceptions, nothing else")
	}
	if d.Escalation.To != events.CouncilOwner {
		t.Errorf("escalation to %q", d.Escalation.To)
	}
	if _, ok := d.Escalation.EscalationDue("error", events.CouncilOwner, t0); ok {
		t.Error("an announcement the council owns escalates to the council")
	}
	if due, ok := d.Escalation.EscalationDue("error", "owner-a", t0); !ok || !due.Equal(t0.Add(4*time.Hour)) {
		t.Errorf("escalation due %v %v", due, ok)
	}
	if _, ok := d.Escalation.EscalationDue("info", "owner-a", t0); ok {
		t.Error("info escalates")
	}
}
