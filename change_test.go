package gcos_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"gcos"
)

func TestChangeKinds(t *testing.T) {
	t.Parallel()
	if len(gcos.ChangeKinds) != 10 {
		t.Fatalf("want the ten handoff kinds, got %d", len(gcos.ChangeKinds))
	}
	wantReason := map[gcos.ChangeKind]string{
		"object_born": "handoff:object_born", "object_registered": "handoff:object_registered",
		"collection_changed": "handoff:collection_changed", "count_changed": "handoff:count_changed",
		"object_retired": "handoff:object_retired", "source_changed": "handoff:source_changed",
		"axis_introduced": "axis", "policy_changed": "ruleset_bump", "authority_changed": "authority",
		"ruleset_changed": "ruleset_bump",
	}
	for _, k := range gcos.ChangeKinds {
		got, err := gcos.ParseChangeKind(string(k))
		if err != nil || got != k {
			t.Errorf("ParseChangeKind(%q) = %q, %v", k, got, err)
		}
		if r := gcos.DirtyReasonFor(k); r != wantReason[k] {
			t.Errorf("DirtyReasonFor(%q) = %q, want %q", k, r, wantReason[k])
		}
		if e := k.EventType(); e != "governance.handoff."+string(k) {
			t.Errorf("EventType(%q) = %q", k, e)
		}
	}
	for _, bad := range []string{"", "born", "OBJECT_BORN", "skip"} {
		if _, err := gcos.ParseChangeKind(bad); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("ParseChangeKind(%q) error = %v, want EINVALID", bad, err)
		}
	}
}

func TestValidateSafePayload(t *testing.T) {
	t.Parallel()
	var decoded map[string]any
	dec := json.NewDecoder(strings.NewReader(`{"group_key":"abc","count":3}`))
	dec.UseNumber()
	if err := dec.Decode(&decoded); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		payload map[string]any
		wantErr []string
	}{
		{"empty", map[string]any{}, nil},
		{"all allowed keys", map[string]any{"object_type": "route", "collection_name": "routes", "group_key": "k",
			"change_kind": "object_born", "occurred_at": time.Now(), "source": "birth_registry", "object_ref": "R1",
			"canonical_address": "routes:R1", "count": 2}, nil},
		{"decoded with numbers", decoded, nil},
		{"null value", map[string]any{"object_ref": nil}, nil},
		{"contents smuggled as a key", map[string]any{"group_key": "k", "body": "secret"}, []string{`key "body" is not allowed`}},
		{"every bad key named", map[string]any{"zeta": 1, "alpha": 2}, []string{`key "alpha"`, `key "zeta"`}},
		{"nested object under an allowed key", map[string]any{"object_ref": map[string]any{"x": 1}},
			[]string{`key "object_ref": value must be a scalar`}},
		{"array under an allowed key", map[string]any{"count": []any{1, 2}}, []string{`key "count": value must be a scalar`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := gcos.ValidateSafePayload(tt.payload)
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if gcos.ErrorCode(err) != gcos.EINVALID {
				t.Fatalf("error = %v, want EINVALID", err)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestSignal(t *testing.T) {
	t.Parallel()
	s := gcos.Signal{ObjectType: "route", CollectionName: "routes", GroupKey: "k", ChangeKind: gcos.ChangeObjectBorn,
		Source: "birth_registry", OccurredAt: time.Date(2026, 6, 10, 8, 0, 0, 0, time.FixedZone("x", 3600))}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	p := s.SafePayload()
	if err := gcos.ValidateSafePayload(p); err != nil {
		t.Fatalf("a signal's own payload must be safe: %v", err)
	}
	if p["occurred_at"] != "2026-06-10T07:00:00Z" {
		t.Fatalf("occurred_at = %v, want UTC RFC 3339", p["occurred_at"])
	}
	for name, bad := range map[string]gcos.Signal{
		"kind":   {ChangeKind: "born", Source: "x", OccurredAt: time.Now()},
		"source": {ChangeKind: gcos.ChangeObjectBorn, OccurredAt: time.Now()},
		"time":   {ChangeKind: gcos.ChangeObjectBorn, Source: "x"},
	} {
		if err := bad.Validate(); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("%s: Validate = %v, want EINVALID", name, err)
		}
	}
}
