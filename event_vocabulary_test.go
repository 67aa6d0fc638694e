package gcos

import (
	"slices"
	"strings"
	"testing"
)

func TestVocabularyLoads(t *testing.T) {
	t.Parallel()
	v, err := LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	if v.Domain != EventDomain {
		t.Fatalf("domain %q", v.Domain)
	}
	for _, tt := range v.Types {
		if !strings.HasPrefix(tt.EventType, "governance.") {
			t.Errorf("%s: not under the governance domain", tt.EventType)
		}
	}
	// Load hands out a copy: a caller's edit cannot change the next caller's vocabulary.
	v.Types[0].EventType = "governance.tampered.type"
	again, _ := LoadVocabulary()
	if again.Types[0].EventType == "governance.tampered.type" {
		t.Fatal("Load shares its slice")
	}
}

func TestVocabularyFamilies(t *testing.T) {
	t.Parallel()
	v, err := LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	// Family A: the ten handoff kinds of doc 32 §3, their heartbeat and the four faults of doc 32 §8.
	var want []string
	for _, k := range ChangeKinds {
		want = append(want, k.EventType())
	}
	want = append(want, "governance.handoff.heartbeat", "governance.handoff.lag", "governance.handoff.dlq",
		"governance.handoff.silent_gap", "governance.handoff.unregistered_type", "governance.handoff.unmapped_row",
		"governance.handoff.out_of_order",
		// B–D and the SB-12 streams, as named by doc 41 §41.4 and docs 31/33/34/38.
		"governance.backfill.inventory_gap", "governance.backfill.sweep_completed",
		"governance.input.invalid_schema", "governance.input.untrusted_source",
		"governance.candidate.stale", "governance.candidate.unknown", "governance.candidate.scan_lag",
		"governance.candidate.group_invalidation_storm", "governance.candidate.scan_completed",
		"governance.coverage.orphan", "governance.coverage.scan_completed", "governance.owner.assigned",
		"governance.phantom.gap", "governance.snapshot.captured", "governance.ruleset.activated",
		// What GCOS announces beyond doc 41's list: an unratified exception (routed to the council), an escalation,
		// an axis the registry no longer holds.
		"governance.exception.unratified", "governance.lifecycle.escalated", "governance.coverage.axis_unregistered")
	for _, name := range want {
		if _, ok := v.Lookup(name); !ok {
			t.Errorf("vocabulary lacks %s", name)
		}
	}
	families := map[string]int{}
	for _, tt := range v.Types {
		families[tt.Family]++
	}
	for _, f := range []string{"A", "B", "C", "D", "E"} {
		if families[f] == 0 {
			t.Errorf("family %s is empty", f)
		}
	}
	// Of doc 33 §8's seven input-quality types, the vocabulary holds the ones a GCOS check raises (the rest are the
	// input gate's, which GCOS does not run: docs/REFERENCE.md says so).
	if n := families["C"]; n != len(InputFindingStates) {
		t.Errorf("family C has %d input-quality types, want the %d GCOS raises", n, len(InputFindingStates))
	}
}

func TestHeartbeatType(t *testing.T) {
	t.Parallel()
	v, err := LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		stream, want string
		ok           bool
	}{
		{"handoff", "governance.handoff.heartbeat", true},
		{"governance.handoff", "governance.handoff.heartbeat", true},
		{"candidate", "governance.candidate.scan_completed", true},
		{"backfill", "governance.backfill.sweep_completed", true},
		{"coverage", "governance.coverage.scan_completed", true},
		{"snapshot", "governance.snapshot.captured", true},
		{"lifecycle", "", false},
		{"nope", "", false},
		{"", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.stream, func(t *testing.T) {
			t.Parallel()
			got, ok := v.HeartbeatType(tc.stream)
			if ok != tc.ok || got.EventType != tc.want {
				t.Fatalf("HeartbeatType(%q) = %q, %v; want %q, %v", tc.stream, got.EventType, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestParseRefusesBadVocabulary(t *testing.T) {
	t.Parallel()
	entry := func(typ, stream, lane, sev, desc string, hb bool) string {
		h := ""
		if hb {
			h = `, "heartbeat": true`
		}
		return `{"family": "A", "event_type": "` + typ + `", "event_stream": "` + stream + `", "delivery_lane": "` + lane +
			`", "default_severity": "` + sev + `", "description": "` + desc + `"` + h + `}`
	}
	doc := func(domain string, entries ...string) string {
		return `{"domain": "` + domain + `", "version": 1, "source": "t", "types": [` + strings.Join(entries, ",") + `]}`
	}
	good := entry("governance.x.y", "governance.x", "immediate", "info", "d", false)
	tests := []struct {
		name, doc, wantErr string
	}{
		{"ok", doc("governance", good), ""},
		{"other domain", doc("iu", good), "domain"},
		{"empty", doc("governance"), "no types"},
		{"unknown field", `{"domain": "governance", "types": [], "extra": 1}`, "unknown field"},
		{"not governance", doc("governance", entry("iu.x.y", "governance.x", "immediate", "info", "d", false)), "event_type"},
		{"one segment", doc("governance", entry("governance.x", "governance.x", "immediate", "info", "d", false)), "event_type"},
		{"upper case", doc("governance", entry("governance.X.y", "governance.x", "immediate", "info", "d", false)), "event_type"},
		{"duplicate", doc("governance", good, good), "duplicate"},
		{"bad stream", doc("governance", entry("governance.x.y", "x", "immediate", "info", "d", false)), "event_stream"},
		{"bad lane", doc("governance", entry("governance.x.y", "governance.x", "now", "info", "d", false)), "delivery_lane"},
		{"bad severity", doc("governance", entry("governance.x.y", "governance.x", "immediate", "critical", "d", false)), "default_severity"},
		{"no description", doc("governance", entry("governance.x.y", "governance.x", "immediate", "info", " ", false)), "description"},
		{"two heartbeats", doc("governance", entry("governance.x.a", "governance.x", "digest", "info", "d", true),
			entry("governance.x.b", "governance.x", "digest", "info", "d", true)), "heartbeat"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseVocabulary([]byte(tc.doc))
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
			}
		})
	}
}

func TestNames(t *testing.T) {
	t.Parallel()
	valid := []string{"governance.handoff.object_born", "governance.coverage.owner.gap", "governance.a1.b_2"}
	invalid := []string{"", "governance", "governance.", "governance.handoff", "governance..x", "governance.x.",
		"iu.message.received", "governance.Handoff.x", "governance.x.y-z", "Governance.x.y"}
	for _, n := range valid {
		if !ValidEventType(n) {
			t.Errorf("ValidEventType(%q) = false", n)
		}
	}
	for _, n := range invalid {
		if ValidEventType(n) {
			t.Errorf("ValidEventType(%q) = true", n)
		}
	}
	streams := map[string]string{"handoff": "governance.handoff", "governance.handoff": "governance.handoff", " x ": "governance.x", "": ""}
	for in, want := range streams {
		if got := NormalizeEventStream(in); got != want {
			t.Errorf("NormalizeEventStream(%q) = %q, want %q", in, got, want)
		}
	}
	for s, want := range map[string]bool{"handoff": true, "governance.handoff": true, "": false, "iu.message": false,
		"governance.a.b": false, "Handoff": false, "governance.": false, "a-b": false} {
		if got := ValidEventStream(s); got != want {
			t.Errorf("ValidEventStream(%q) = %v, want %v", s, got, want)
		}
	}
	if got := EventStreamOf("governance.handoff.object_born"); got != "governance.handoff" {
		t.Errorf("EventStreamOf = %q", got)
	}
	v, _ := LoadVocabulary()
	if !slices.Contains(v.Streams(), "governance.lifecycle") {
		t.Errorf("streams %v lack governance.lifecycle", v.Streams())
	}
}

// Every finding type of SPEC §11 can be announced: its event (governance.<family>.<state>) is in the vocabulary.
// Input findings are the seven states of doc 33 §8 that route to a finding; birth_or_registry_missing and
// needs_backfill reuse other lanes (doc 41 §41.4 C).
func TestVocabularyAnnouncesFindings(t *testing.T) {
	t.Parallel()
	v, err := LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range IssueSpecs {
		if _, ok := v.Lookup(spec.EventType()); !ok {
			t.Errorf("finding %s: event %s not in the vocabulary", spec.Type, spec.EventType())
		}
	}
	for _, q := range InputFindingStates {
		spec, ok := SpecFor(InputIssue(q))
		if !ok {
			t.Fatalf("no spec for %s", InputIssue(q))
		}
		if _, ok := v.Lookup(spec.EventType()); !ok {
			t.Errorf("input finding %s: event %s not in the vocabulary", spec.Type, spec.EventType())
		}
	}
}

func TestCoverageEvent(t *testing.T) {
	for _, tc := range []struct{ before, after, want string }{
		{"orphan", "covered", "governance.owner.assigned"},
		{"approved_exception", "covered", "governance.owner.assigned"},
		{"covered", "orphan", "governance.owner.revoked"},
		{"covered", "approved_exception", "governance.owner.revoked"},
		{"orphan", "approved_exception", "governance.exception.granted"},
		{"approved_exception", "orphan", ""}, // the exception_lifted finding announces it
		{"", "covered", ""},                  // newly relevant: a verdict change
		{"covered", "", ""},
		{"covered", "covered", ""},
	} {
		got, ok := CoverageEvent(tc.before, tc.after)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("CoverageEvent(%q, %q) = %q, %v; want %q", tc.before, tc.after, got, ok, tc.want)
		}
	}
	v, err := LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"governance.owner.assigned", "governance.owner.revoked", "governance.exception.granted"} {
		if _, ok := v.Lookup(typ); !ok {
			t.Errorf("%s is not in the vocabulary", typ)
		}
	}
}
