package events

import (
	"encoding/json"
	"slices"
	"testing"
)

func ptr(s string) *string { return &s }

func sampleEvent() Event {
	return Event{
		ID: "e1", Domain: "governance", Type: "governance.handoff.object_born", Stream: "governance.handoff",
		DeliveryLane: "digest", Severity: "info", SubjectTable: "birth_registry", SubjectRef: "INV-1",
		CanonicalAddress: "fin_invoices:INV-1", ActorRef: "svc:birth", SourceSystem: "birth",
		Payload: map[string]any{"object_type": "invoice", "group_key": "g1", "change_kind": "object_born", "count": float64(3)},
	}
}

func TestSubscriptionMatches(t *testing.T) {
	t.Parallel()
	filter := func(s string) map[string]any {
		var m map[string]any
		if err := json.Unmarshal([]byte(s), &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name string
		sub  Subscription
		want bool
	}{
		{"all wildcards", Subscription{}, true},
		{"domain", Subscription{EventDomain: ptr("governance")}, true},
		{"other domain", Subscription{EventDomain: ptr("iu")}, false},
		{"exact type", Subscription{EventType: ptr("governance.handoff.object_born")}, true},
		{"other type", Subscription{EventType: ptr("governance.handoff.object_retired")}, false},
		{"type prefix", Subscription{EventType: ptr("governance.handoff.*")}, true},
		{"domain-wide pattern", Subscription{EventType: ptr("governance.*")}, true},
		{"type prefix miss", Subscription{EventType: ptr("governance.candidate.*")}, false},
		{"wildcard inside the type", Subscription{EventType: ptr("governance.*.object_born")}, true},
		{"one-character wildcard", Subscription{EventType: ptr("governance.handoff.object_bor?")}, true},
		{"types are case-sensitive", Subscription{EventType: ptr("Governance.*")}, false},
		{"malformed pattern selects nothing", Subscription{EventType: ptr("governance.[")}, false},
		{"stream pattern", Subscription{EventStream: ptr("governance.hand*")}, true},
		{"stream", Subscription{EventStream: ptr("governance.handoff")}, true},
		{"other stream", Subscription{EventStream: ptr("governance.candidate")}, false},
		{"subject table", Subscription{ScopeSubjectTable: ptr("birth_registry")}, true},
		{"other subject table", Subscription{ScopeSubjectTable: ptr("event_outbox")}, false},
		{"filter on payload", Subscription{ScopeFilter: filter(`{"object_type": "invoice"}`)}, true},
		{"filter on payload miss", Subscription{ScopeFilter: filter(`{"object_type": "order"}`)}, false},
		{"filter on column", Subscription{ScopeFilter: filter(`{"delivery_lane": "digest"}`)}, true},
		{"live lane filter", Subscription{ScopeFilter: filter(`{"delivery_lane": "immediate"}`)}, false},
		{"collection from address", Subscription{ScopeFilter: filter(`{"collection_name": "fin_invoices"}`)}, true},
		{"any of", Subscription{ScopeFilter: filter(`{"collection_name": ["crm_accounts", "fin_invoices"]}`)}, true},
		{"any of miss", Subscription{ScopeFilter: filter(`{"collection_name": ["crm_accounts"]}`)}, false},
		{"number", Subscription{ScopeFilter: filter(`{"count": 3}`)}, true},
		{"absent fact", Subscription{ScopeFilter: filter(`{"scope": "health"}`)}, false},
		{"object value never matches", Subscription{ScopeFilter: filter(`{"object_type": {"x": 1}}`)}, false},
		{"all keys must hold", Subscription{ScopeFilter: filter(`{"object_type": "invoice", "group_key": "g2"}`)}, false},
		{"everything", Subscription{EventDomain: ptr("governance"), EventType: ptr("governance.*"), EventStream: ptr("governance.handoff"),
			ScopeSubjectTable: ptr("birth_registry"), ScopeFilter: filter(`{"group_key": "g1", "source_system": "birth"}`)}, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := tc.sub.Matches(sampleEvent()); got != tc.want {
				t.Fatalf("Matches = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRouteFor(t *testing.T) {
	t.Parallel()
	subs := []Subscription{
		{ID: "s1", RecipientRef: "owner-a", EventDomain: ptr("governance")},
		{ID: "s2", RecipientRef: "owner-b", EventStream: ptr("governance.handoff")},
		{ID: "s3", RecipientRef: "owner-b", EventType: ptr("governance.handoff.object_born"), Mute: true},
		{ID: "s4", RecipientRef: "owner-c", EventStream: ptr("governance.candidate")},
		{ID: "s5", RecipientRef: "owner-d", EventType: ptr("governance.candidate.*"), Mute: true},
		{ID: "s6", RecipientRef: "owner-d", EventDomain: ptr("governance")},
		{ID: "s7", RecipientRef: "owner-e", EventDomain: ptr("governance"), Mute: true},
	}
	tests := []struct {
		recipient string
		want      Route
	}{
		{"owner-a", Route{Notify: true, Matched: []string{"s1"}}},
		{"owner-b", Route{Notify: false, Matched: []string{"s2"}, MutedBy: []string{"s3"}}},
		{"owner-c", Route{}},
		{"owner-d", Route{Notify: true, Matched: []string{"s6"}}},
		{"owner-e", Route{MutedBy: []string{"s7"}}},
		{"nobody", Route{}},
	}
	for _, tc := range tests {
		t.Run(tc.recipient, func(t *testing.T) {
			t.Parallel()
			got := RouteFor(tc.recipient, subs, sampleEvent())
			if got.Notify != tc.want.Notify || !slices.Equal(got.Matched, tc.want.Matched) || !slices.Equal(got.MutedBy, tc.want.MutedBy) {
				t.Fatalf("RouteFor(%s) = %+v, want %+v", tc.recipient, got, tc.want)
			}
		})
	}
	if got := Recipients(subs, sampleEvent()); !slices.Equal(got, []string{"owner-a", "owner-d"}) {
		t.Fatalf("Recipients = %v", got)
	}
}
