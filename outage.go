package gcos

import (
	"log/slog"
	"time"
)

// Outage is a loop's view of a dependency (the database) that keeps failing: how long to wait before the next
// try, doubling from Base up to Max, and when to say so — once when the failures start, once every Every while
// they last, once when a try succeeds again. A loop that logged every failed try would write ten lines a second
// through an outage and bury the one line that matters. Pure: the caller passes the clock.
type Outage struct {
	Base, Max, Every time.Duration

	down     bool
	since    time.Time // the first failure of this outage
	lastNote time.Time
	wait     time.Duration
	failures int
}

// OutageNote is what a try's outcome says about the outage.
type OutageNote int

const (
	NoteNone      OutageNote = iota // nothing new: stay quiet
	NoteDown                        // the first failure after a success
	NoteStillDown                   // still failing, Every after the last note
	NoteRecovered                   // a success after failures
)

// Fail records a failed try at now and returns how long to wait before the next one, and what to say.
func (o *Outage) Fail(now time.Time) (time.Duration, OutageNote) {
	o.failures++
	if !o.down {
		o.down, o.since, o.lastNote, o.wait = true, now, now, max(o.Base, time.Millisecond)
		return o.wait, NoteDown
	}
	o.wait = min(o.wait*2, max(o.Max, o.Base))
	if now.Sub(o.lastNote) >= o.Every {
		o.lastNote = now
		return o.wait, NoteStillDown
	}
	return o.wait, NoteNone
}

// Succeed records a successful try at now; after failures it says NoteRecovered (once).
func (o *Outage) Succeed(now time.Time) OutageNote {
	if !o.down {
		return NoteNone
	}
	o.down, o.failures, o.wait = false, 0, 0
	return NoteRecovered
}

// Down reports whether the last try failed, since when, and how many tries have failed since.
func (o *Outage) Down() (bool, time.Time, int) { return o.down, o.since, o.failures }

// OutageLog is an Outage that writes its notes to a logger: what names the work ("event scan", "intake poll").
type OutageLog struct {
	Outage
	What   string
	Logger *slog.Logger
}

// NewOutageLog returns an OutageLog for what, backing off from base up to cfg's cap.
func NewOutageLog(what string, base time.Duration, cfg OutageConfig, logger *slog.Logger) *OutageLog {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &OutageLog{Outage: Outage{Base: base, Max: cfg.BackoffMax.Duration(), Every: cfg.LogEvery.Duration()}, What: what, Logger: logger}
}

// Failed records err and returns how long to wait before trying again.
func (l *OutageLog) Failed(err error) time.Duration {
	now := time.Now()
	wait, note := l.Fail(now)
	switch note {
	case NoteDown:
		l.Logger.Warn(l.What+" failed; retrying with back-off, quiet until it recovers (a reminder every "+l.Every.String()+")",
			"err", err, "retry_in", wait)
	case NoteStillDown:
		_, since, n := l.Down()
		l.Logger.Warn(l.What+" still failing", "for", now.Sub(since).Round(time.Second), "failures", n, "err", err, "retry_in", wait)
	}
	return wait
}

// Succeeded records a success; after failures it logs the recovery once.
func (l *OutageLog) Succeeded() {
	_, since, n := l.Down()
	if l.Succeed(time.Now()) == NoteRecovered {
		l.Logger.Info(l.What+" recovered", "after", time.Since(since).Round(time.Millisecond), "failures", n)
	}
}
