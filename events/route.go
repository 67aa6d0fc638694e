package events

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"gcos"
)

// Event is one event_outbox row as routing sees it: its addressing columns and its safe payload.
type Event struct {
	ID               string         `json:"id"`
	Domain           string         `json:"event_domain"`
	Type             string         `json:"event_type"`
	Stream           string         `json:"event_stream"`
	DeliveryLane     string         `json:"delivery_lane"`
	Severity         string         `json:"event_severity,omitempty"`
	SubjectTable     string         `json:"event_subject_table"`
	SubjectRef       string         `json:"event_subject_ref,omitempty"`
	CanonicalAddress string         `json:"canonical_address"`
	ActorRef         string         `json:"actor_ref"`
	SourceSystem     string         `json:"source_system"`
	Payload          map[string]any `json:"safe_payload"`
}

// Fact returns the value of a named attribute of the event, as text: a column (event_domain, event_type,
// event_stream, delivery_lane, event_severity, event_subject_table, event_subject_ref, canonical_address,
// actor_ref, source_system), collection_name (from the payload, else the canonical address before its first ":"),
// or a scalar key of the safe payload.
func (e Event) Fact(name string) (string, bool) {
	switch name {
	case "event_domain":
		return e.Domain, e.Domain != ""
	case "event_type":
		return e.Type, e.Type != ""
	case "event_stream":
		return e.Stream, e.Stream != ""
	case "delivery_lane":
		return e.DeliveryLane, e.DeliveryLane != ""
	case "event_severity", "severity":
		return e.Severity, e.Severity != ""
	case "event_subject_table", "subject_table":
		return e.SubjectTable, e.SubjectTable != ""
	case "event_subject_ref", "subject_ref":
		return e.SubjectRef, e.SubjectRef != ""
	case "canonical_address":
		return e.CanonicalAddress, e.CanonicalAddress != ""
	case "actor_ref":
		return e.ActorRef, e.ActorRef != ""
	case "source_system":
		return e.SourceSystem, e.SourceSystem != ""
	}
	if v, ok := e.Payload[name]; ok {
		return scalarText(v)
	}
	if name == "collection_name" {
		if c, _, ok := strings.Cut(e.CanonicalAddress, ":"); ok && c != "" {
			return c, true
		}
	}
	return "", false
}

// Subscription is one event_subscription row. Nil pointers are wildcards (the column is NULL).
type Subscription struct {
	ID                string         `json:"id"`
	RecipientRef      string         `json:"recipient_ref"`
	EventDomain       *string        `json:"event_domain"`
	EventType         *string        `json:"event_type"`
	EventStream       *string        `json:"event_stream"`
	ScopeSubjectTable *string        `json:"scope_subject_table"`
	ScopeFilter       map[string]any `json:"scope_filter"`
	Mute              bool           `json:"mute"`
}

// Matches reports whether the subscription selects e. Each set column must match: event_domain and
// scope_subject_table exactly, event_type and event_stream as a pattern of GCOS's one syntax (gcos.Glob,
// case-sensitive: "governance.*", "governance.handoff.*", "governance.*.heartbeat", or a literal type). Every key of scope_filter must name a fact of the event (see
// Event.Fact) whose value equals the filter value, or one of them when the filter value is an array; a filter
// key the event does not carry, or a filter value that is an object, does not match.
func (s Subscription) Matches(e Event) bool {
	if s.EventDomain != nil && *s.EventDomain != e.Domain {
		return false
	}
	if s.EventType != nil && !patternMatch(*s.EventType, e.Type) {
		return false
	}
	if s.EventStream != nil && !patternMatch(*s.EventStream, e.Stream) {
		return false
	}
	if s.ScopeSubjectTable != nil && *s.ScopeSubjectTable != e.SubjectTable {
		return false
	}
	for key, want := range s.ScopeFilter {
		got, ok := e.Fact(key)
		if !ok || !filterValueMatch(want, got) {
			return false
		}
	}
	return true
}

// patternMatch matches a subscription's pattern (gcos.Glob, case-sensitive: event types are lower-case names).
func patternMatch(pattern, value string) bool { return gcos.MatchGlob(pattern, value, false) }

func filterValueMatch(want any, got string) bool {
	if list, ok := want.([]any); ok {
		for _, w := range list {
			if s, ok := scalarText(w); ok && s == got {
				return true
			}
		}
		return false
	}
	s, ok := scalarText(want)
	return ok && s == got
}

// scalarText renders a JSON scalar as text; objects and arrays have no text.
func scalarText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case bool:
		return strconv.FormatBool(x), true
	case json.Number:
		return x.String(), true
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32), true
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64:
		return fmt.Sprint(x), true
	case nil:
		return "null", true
	}
	return "", false
}

// Route is the routing decision for one recipient and one event.
type Route struct {
	Notify  bool     `json:"notify"`
	Matched []string `json:"matched,omitempty"`  // ids of the unmuted subscriptions that selected the event
	MutedBy []string `json:"muted_by,omitempty"` // ids of the muted subscriptions that selected it
}

// RouteFor decides whether recipient is notified of e given the subscriptions (other recipients' rows are
// ignored): notified when an unmuted subscription of the recipient matches and no muted one does. Mute wins, and
// it only ever suppresses the notification: the finding behind the event is untouched.
func RouteFor(recipient string, subs []Subscription, e Event) Route {
	var r Route
	for _, s := range subs {
		if s.RecipientRef != recipient || !s.Matches(e) {
			continue
		}
		if s.Mute {
			r.MutedBy = append(r.MutedBy, s.ID)
		} else {
			r.Matched = append(r.Matched, s.ID)
		}
	}
	r.Notify = len(r.Matched) > 0 && len(r.MutedBy) == 0
	return r
}

// Recipients lists, sorted, every recipient notified of e by subs.
func Recipients(subs []Subscription, e Event) []string {
	var all []string
	for _, s := range subs {
		if !slices.Contains(all, s.RecipientRef) {
			all = append(all, s.RecipientRef)
		}
	}
	var out []string
	for _, r := range all {
		if RouteFor(r, subs, e).Notify {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return out
}
