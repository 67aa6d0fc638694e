package events

import (
	"slices"
	"time"

	"gcos"
)

// Emission discipline (doc 41 §41.8–§41.9, doc 24 §6): what GCOS announces of its own findings and runs is
// throttled so that a storm of detections reaches a subscriber as a handful of events and a digest, never as a
// flood, and never as silence. These are the decisions, as functions of values; the promoter (package postgres)
// holds the state they read and applies them in capture order.

// Rule is one discipline rule, from configuration (gcos.EventRule).
type Rule struct {
	// Types is a gcos.Glob over event types; the first rule whose pattern matches a type applies to it.
	Types string
	// Cooldown: an announcement about a subject waits until this long after the last one of its type about the
	// same subject; while it waits, a newer one about that subject supersedes it (coalesced: the latest state is
	// the one announced). 0: no cooldown.
	Cooldown time.Duration
	// Ceiling caps the announcements of one type per Window; beyond it they are held back and counted into the
	// digest the window closes with. 0: no ceiling.
	Ceiling int
	Window  time.Duration
}

// Escalation names when an unread announcement is escalated: one of Severities, still unread by its routed owner
// After its emission, is announced again to To (the council by default).
type Escalation struct {
	Severities []string
	After      time.Duration
	To         string
}

// Discipline is the rule list and the escalation policy.
type Discipline struct {
	Rules      []Rule
	Escalation Escalation
	// CouncilTypes are the announcements that are authority disputes: they route to the council whatever the owner
	// resolver would say (gcos.Glob patterns).
	CouncilTypes []string
}

// DisciplineFrom turns the configuration into a Discipline.
func DisciplineFrom(c gcos.EventsConfig) Discipline {
	d := Discipline{CouncilTypes: slices.Clone(c.CouncilTypes), Escalation: Escalation{
		Severities: slices.Clone(c.Escalation.Severities), After: c.Escalation.After.Duration(), To: c.Escalation.To}}
	if d.Escalation.To == "" {
		d.Escalation.To = CouncilOwner
	}
	for _, r := range c.Rules {
		d.Rules = append(d.Rules, Rule{Types: r.Types, Cooldown: r.Cooldown.Duration(), Ceiling: r.Ceiling,
			Window: r.Window.Duration()})
	}
	return d
}

// RuleFor returns the rule of eventType: the first that matches, or a zero rule (no throttling).
func (d Discipline) RuleFor(eventType string) Rule {
	for _, r := range d.Rules {
		if gcos.MatchGlob(r.Types, eventType, false) {
			return r
		}
	}
	return Rule{Types: eventType}
}

// IsDispute reports whether an announcement of eventType is an authority dispute, routed to the council.
func (d Discipline) IsDispute(eventType string) bool {
	return slices.ContainsFunc(d.CouncilTypes, func(p string) bool { return gcos.MatchGlob(p, eventType, false) })
}

// Window is one type's emission window as the store holds it. A zero Window is no window yet.
type Window struct {
	Start, End time.Time
	Emitted    int
	Held       int
}

// Open reports whether the window covers now.
func (w Window) Open(now time.Time) bool { return !w.Start.IsZero() && now.Before(w.End) }

// Outcomes of Decide.
const (
	Release = "release" // announce it now
	Wait    = "wait"    // within the cooldown: stays captured, announced when the cooldown ends unless superseded
	Hold    = "hold"    // over the ceiling: held back, counted into the window's digest
)

// Decision is what happens to one announcement, and the type's window after it.
type Decision struct {
	Outcome string
	// Until is when a waiting announcement may go (the end of the cooldown).
	Until time.Time
	// Window is the type's window after this announcement; Closed is the window it replaced, which the caller
	// digests when it held anything back.
	Window Window
	Closed *Window
}

// Decide applies rule r to one announcement at now, given when its type last announced the same subject (zero:
// never) and the type's current window. The cooldown comes first: a waiting announcement is not counted against
// the ceiling until it goes.
func Decide(r Rule, lastAnnounced time.Time, w Window, now time.Time) Decision {
	if r.Cooldown > 0 && !lastAnnounced.IsZero() {
		if until := lastAnnounced.Add(r.Cooldown); now.Before(until) {
			return Decision{Outcome: Wait, Until: until, Window: w}
		}
	}
	if r.Ceiling <= 0 || r.Window <= 0 {
		return Decision{Outcome: Release, Window: w}
	}
	d := Decision{Window: w}
	if !w.Open(now) {
		if !w.Start.IsZero() {
			closed := w
			d.Closed = &closed
		}
		d.Window = Window{Start: now, End: now.Add(r.Window)}
	}
	if d.Window.Emitted >= r.Ceiling {
		d.Window.Held++
		d.Outcome = Hold
		return d
	}
	d.Window.Emitted++
	d.Outcome = Release
	return d
}

// EscalationDue reports when an announcement of severity emitted at emittedAt to owner escalates: never when its
// severity is not escalated, when no SLA is set, or when its owner already is the escalation's recipient.
func (e Escalation) EscalationDue(severity, owner string, emittedAt time.Time) (time.Time, bool) {
	if e.After <= 0 || !slices.Contains(e.Severities, severity) || owner == e.To {
		return time.Time{}, false
	}
	return emittedAt.Add(e.After), true
}
