package gcos

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// EventDomain is the one event domain every GCOS event type lives under (doc 41 §41.10: one domain, no second bus).
const EventDomain = "governance"

// Delivery lanes and severities a vocabulary entry may use; they are the values the live registry already uses.
var (
	EventDeliveryLanes = []string{"immediate", "digest"}
	EventSeverities    = []string{"info", "warning", "error"}
)

//go:embed event_vocabulary.json
var vocabularyJSON []byte

// VocabularyEntry is one entry of the vocabulary: one event_type_registry row of domain governance.
type VocabularyEntry struct {
	Family          string `json:"family"` // A–E of doc 41 §41.4, or SB-12
	EventType       string `json:"event_type"`
	EventStream     string `json:"event_stream"`
	DeliveryLane    string `json:"delivery_lane"`
	DefaultSeverity string `json:"default_severity"`
	Description     string `json:"description"`
	Heartbeat       bool   `json:"heartbeat,omitempty"` // the stream's once-per-run heartbeat type
}

// Vocabulary is the governance event vocabulary.
type Vocabulary struct {
	Domain  string            `json:"domain"`
	Version int               `json:"version"`
	Source  string            `json:"source"`
	Types   []VocabularyEntry `json:"types"`
}

var (
	loadOnce sync.Once
	loaded   Vocabulary
	loadErr  error
)

// LoadVocabulary returns the embedded vocabulary, parsed and validated once.
func LoadVocabulary() (Vocabulary, error) {
	loadOnce.Do(func() { loaded, loadErr = ParseVocabulary(vocabularyJSON) })
	if loadErr != nil {
		return Vocabulary{}, loadErr
	}
	v := loaded
	v.Types = slices.Clone(loaded.Types)
	return v, nil
}

// ParseVocabulary reads a vocabulary document (unknown fields are refused) and validates it.
func ParseVocabulary(b []byte) (Vocabulary, error) {
	var v Vocabulary
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return Vocabulary{}, fmt.Errorf("event vocabulary: %w", err)
	}
	if err := v.Validate(); err != nil {
		return Vocabulary{}, err
	}
	return v, nil
}

// Validate checks that every entry is a well-formed governance type: named under its stream, unique, with a known
// lane and severity and a description, and at most one heartbeat type per stream.
func (v Vocabulary) Validate() error {
	if v.Domain != EventDomain {
		return fmt.Errorf("event vocabulary: domain %q, want %q", v.Domain, EventDomain)
	}
	if len(v.Types) == 0 {
		return fmt.Errorf("event vocabulary: no types")
	}
	seen := map[string]bool{}
	heartbeats := map[string]string{}
	for i, t := range v.Types {
		where := fmt.Sprintf("event vocabulary: entry %d (%s)", i, t.EventType)
		switch {
		case !ValidEventType(t.EventType):
			return fmt.Errorf("%s: event_type must be governance.<segment>.<segment>[...] in lower case", where)
		case seen[t.EventType]:
			return fmt.Errorf("%s: duplicate event_type", where)
		case !strings.HasPrefix(t.EventStream, EventDomain+".") || strings.Count(t.EventStream, ".") != 1:
			return fmt.Errorf("%s: event_stream %q must be governance.<stream>", where, t.EventStream)
		case !slices.Contains(EventDeliveryLanes, t.DeliveryLane):
			return fmt.Errorf("%s: delivery_lane %q is not one of %v", where, t.DeliveryLane, EventDeliveryLanes)
		case !slices.Contains(EventSeverities, t.DefaultSeverity):
			return fmt.Errorf("%s: default_severity %q is not one of %v", where, t.DefaultSeverity, EventSeverities)
		case strings.TrimSpace(t.Description) == "":
			return fmt.Errorf("%s: description must not be empty", where)
		case strings.TrimSpace(t.Family) == "":
			return fmt.Errorf("%s: family must not be empty", where)
		}
		seen[t.EventType] = true
		if t.Heartbeat {
			if other, dup := heartbeats[t.EventStream]; dup {
				return fmt.Errorf("%s: stream %s already has heartbeat type %s", where, t.EventStream, other)
			}
			heartbeats[t.EventStream] = t.EventType
		}
	}
	return nil
}

// Lookup returns the entry of eventType.
func (v Vocabulary) Lookup(eventType string) (VocabularyEntry, bool) {
	for _, t := range v.Types {
		if t.EventType == eventType {
			return t, true
		}
	}
	return VocabularyEntry{}, false
}

// Streams lists the vocabulary's streams in first-appearance order.
func (v Vocabulary) Streams() []string {
	var out []string
	for _, t := range v.Types {
		if !slices.Contains(out, t.EventStream) {
			out = append(out, t.EventStream)
		}
	}
	return out
}

// HeartbeatType returns the heartbeat type of a stream ("handoff" or "governance.handoff"): the entry flagged
// heartbeat, governance.<stream>.heartbeat / .scan_completed / .sweep_completed.
func (v Vocabulary) HeartbeatType(stream string) (VocabularyEntry, bool) {
	s := NormalizeEventStream(stream)
	for _, t := range v.Types {
		if t.Heartbeat && t.EventStream == s {
			return t, true
		}
	}
	return VocabularyEntry{}, false
}

// NormalizeEventStream turns a short stream name ("handoff") into its full form ("governance.handoff").
func NormalizeEventStream(stream string) string {
	stream = strings.TrimSpace(stream)
	if stream == "" || strings.HasPrefix(stream, EventDomain+".") {
		return stream
	}
	return EventDomain + "." + stream
}

// ValidEventStream reports whether stream, short ("handoff") or full ("governance.handoff"), names one governance
// stream: exactly one segment of [a-z0-9_] under the domain.
func ValidEventStream(stream string) bool {
	rest, ok := strings.CutPrefix(NormalizeEventStream(stream), EventDomain+".")
	return ok && ValidEventType(EventDomain+".x."+rest) && !strings.Contains(rest, ".")
}

// ValidEventType reports whether name is a governance event type name: "governance." followed by at least two
// dot-separated segments of [a-z0-9_].
func ValidEventType(name string) bool {
	rest, ok := strings.CutPrefix(name, EventDomain+".")
	if !ok {
		return false
	}
	parts := strings.Split(rest, ".")
	if len(parts) < 2 {
		return false
	}
	for _, p := range parts {
		if p == "" {
			return false
		}
		for _, r := range p {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_') {
				return false
			}
		}
	}
	return true
}

// EventStreamOf is the stream a type name implies when no registry row says otherwise: its first two segments
// ("governance.handoff.object_born" → "governance.handoff").
func EventStreamOf(eventType string) string {
	parts := strings.SplitN(eventType, ".", 3)
	if len(parts) < 2 {
		return eventType
	}
	return parts[0] + "." + parts[1]
}

// coverageEvents are the lifecycle events a change of coverage outcome announces: a relevant group (or object row)
// that becomes covered gained an owner, one that stops being covered lost it, one that becomes excepted was granted
// an exception. Only changes between two outcomes count: a group becoming relevant (or no longer) is a verdict
// change, not an ownership fact, and an exception that stops counting is announced by its exception_lifted finding.
var coverageEvents = []struct{ from, to, eventType string }{
	{"*", string(CoverageCovered), "governance.owner.assigned"},
	{string(CoverageCovered), "*", "governance.owner.revoked"},
	{"*", string(CoverageApprovedException), "governance.exception.granted"},
}

// CoverageEvent is the event announcing a coverage outcome going from before to after ("" when not relevant), if
// any: the first matching entry of coverageEvents ("*" matches any other outcome).
func CoverageEvent(before, after string) (string, bool) {
	if before == after || before == "" || after == "" {
		return "", false
	}
	for _, c := range coverageEvents {
		if (c.from == "*" || c.from == before) && (c.to == "*" || c.to == after) {
			return c.eventType, true
		}
	}
	return "", false
}

// CoverageEventTypes lists the event types coverage changes announce.
func CoverageEventTypes() []string {
	var out []string
	for _, c := range coverageEvents {
		out = append(out, c.eventType)
	}
	return out
}

// UnregisteredTypeIssue is the finding of a held signal: handoff_unregistered_type for the handoff stream (doc 32 §8),
// issue_event_gap for every other governance stream (doc 41 §41.9).
func UnregisteredTypeIssue(eventType string) IssueType {
	if strings.HasPrefix(eventType, EventDomain+".handoff.") {
		return IssueHandoffUnregisteredType
	}
	return IssueIssueEventGap
}
