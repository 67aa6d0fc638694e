package gcos_test

import (
	"strings"
	"testing"
	"time"

	"gcos"
)

func TestExceptionHolds(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	fp, other := gcos.Str("00000000000000010000000000000002"), gcos.Str("00000000000000030000000000000004")
	exc := func(edits ...func(*gcos.ExceptionRow)) gcos.ExceptionRow {
		e := gcos.ExceptionRow{ExceptionID: "EXC-1", ScopeCode: gcos.Str("health"), CollectionName: gcos.Str("orders"),
			EntityCode: gcos.Str("o-1"), ApprovalRef: gcos.Str("APR-1"), ExpiresAt: ptr(now.Add(time.Hour)),
			Fingerprint: fp, Status: "approved"}
		for _, f := range edits {
			f(&e)
		}
		return e
	}
	group := func(e *gcos.ExceptionRow) { e.EntityCode, e.Fingerprint = nil, nil }
	tests := []struct {
		name    string
		e       gcos.ExceptionRow
		current *string
		want    string // the lift reason, "" when it holds
	}{
		{"approved, unexpired, pinned to the object as it is", exc(), fp, ""},
		{"expired the instant expires_at is reached", exc(func(e *gcos.ExceptionRow) { e.ExpiresAt = ptr(now) }), fp, gcos.LiftExpired},
		{"no expiry never expires", exc(func(e *gcos.ExceptionRow) { e.ExpiresAt = nil }), fp, ""},
		{"revoked", exc(func(e *gcos.ExceptionRow) { e.Status = "revoked" }), fp, gcos.LiftRevoked},
		{"withdrawn by its approver", exc(func(e *gcos.ExceptionRow) { e.Status = "pending" }), fp, gcos.LiftNotApproved},
		{"approved without an approval reference", exc(func(e *gcos.ExceptionRow) { e.ApprovalRef = gcos.Str("") }), fp, gcos.LiftNotApproved},
		{"the object changed", exc(), other, gcos.LiftFingerprintChanged},
		{"the object has no birth", exc(), nil, gcos.LiftObjectGone},
		{"an object exception that pins nothing", exc(func(e *gcos.ExceptionRow) { e.Fingerprint = nil }), fp, gcos.LiftNotPinned},
		{"an object exception with no scope", exc(func(e *gcos.ExceptionRow) { e.ScopeCode = nil }), fp, gcos.LiftNoScope},
		{"a group exception pins no object", exc(group), nil, ""},
		{"a group exception still expires", exc(group, func(e *gcos.ExceptionRow) { e.ExpiresAt = ptr(now.Add(-time.Second)) }), nil, gcos.LiftExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := tt.e.Holds(now, tt.current)
			switch {
			case tt.want == "" && got != nil:
				t.Fatalf("lifted (%s: %s), want it to hold", got.Reason, got.Detail)
			case tt.want != "" && (got == nil || got.Reason != tt.want):
				t.Fatalf("Holds = %+v, want lift %s", got, tt.want)
			case got != nil && (got.ExceptionID != "EXC-1" || got.Detail == ""):
				t.Fatalf("lift %+v does not name the exception and why", got)
			}
		})
	}
}

func TestCoverageRecordAt(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	fp := gcos.Str("00000000000000010000000000000002")
	// What the scan recorded: an approved exception in 2030, pinned; the registry's row now decides.
	rec := func(owner *string) gcos.CoverageRecord {
		return gcos.CoverageRecord{Outcome: gcos.CoverageApprovedException, Owner: owner, ExceptionID: gcos.Str("EXC-1"),
			ExceptionExpiresAt: ptr(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)), ExceptionFingerprint: fp}
	}
	objectRow := gcos.ExceptionTarget{Scope: "health", Class: "order", Registry: "orders", Object: "orders:o-1"}
	groupRow := gcos.ExceptionTarget{Scope: "health", Class: "order", Registry: "orders"}
	onObject := func(edits ...func(*gcos.ExceptionRow)) *gcos.ExceptionRow {
		e := gcos.ExceptionRow{ExceptionID: "EXC-1", ScopeCode: gcos.Str("health"), CollectionName: gcos.Str("orders"),
			EntityCode: gcos.Str("o-1"), ApprovalRef: gcos.Str("APR-1"), ExpiresAt: ptr(now.Add(time.Hour)), Fingerprint: fp,
			Status: "approved"}
		for _, f := range edits {
			f(&e)
		}
		return &e
	}
	onGroup := func(edits ...func(*gcos.ExceptionRow)) *gcos.ExceptionRow {
		return onObject(append([]func(*gcos.ExceptionRow){func(e *gcos.ExceptionRow) {
			e.EntityCode, e.Fingerprint, e.EntityType = nil, nil, gcos.Str("order")
		}}, edits...)...)
	}
	tests := []struct {
		name    string
		rec     gcos.CoverageRecord
		current *gcos.ExceptionRow
		target  gcos.ExceptionTarget
		fp      *string
		want    gcos.CoverageOutcome
		lift    string
	}{
		{"the registry's row holds", rec(nil), onObject(), objectRow, fp, gcos.CoverageApprovedException, ""},
		{"expiry moved into the past (recorded 2030): orphan", rec(nil), onObject(func(e *gcos.ExceptionRow) { e.ExpiresAt = ptr(now.Add(-time.Minute)) }),
			objectRow, fp, gcos.CoverageOrphan, gcos.LiftExpired},
		{"expires this instant, an owner: covered", rec(gcos.Str("team-a")), onObject(func(e *gcos.ExceptionRow) { e.ExpiresAt = ptr(now) }),
			objectRow, fp, gcos.CoverageCovered, gcos.LiftExpired},
		{"an empty owner is no owner", rec(gcos.Str("")), onObject(func(e *gcos.ExceptionRow) { e.Status = "revoked" }),
			objectRow, fp, gcos.CoverageOrphan, gcos.LiftRevoked},
		{"deleted from the registry", rec(nil), nil, objectRow, fp, gcos.CoverageOrphan, gcos.LiftWithdrawn},
		{"the registry row is another exception", rec(nil), onObject(func(e *gcos.ExceptionRow) { e.ExceptionID = "EXC-2" }),
			objectRow, fp, gcos.CoverageOrphan, gcos.LiftWithdrawn},
		{"moved to another scope", rec(nil), onObject(func(e *gcos.ExceptionRow) { e.ScopeCode = gcos.Str("finance") }),
			objectRow, fp, gcos.CoverageOrphan, gcos.LiftWithdrawn},
		{"moved to another object", rec(nil), onObject(func(e *gcos.ExceptionRow) { e.EntityCode = gcos.Str("o-2") }),
			objectRow, fp, gcos.CoverageOrphan, gcos.LiftWithdrawn},
		{"re-pinned to another fingerprint", rec(nil), onObject(func(e *gcos.ExceptionRow) { e.Fingerprint = gcos.Str("00000000000000030000000000000004") }),
			objectRow, fp, gcos.CoverageOrphan, gcos.LiftFingerprintChanged},
		{"the object changed", rec(nil), onObject(), objectRow, gcos.Str("00000000000000010000000000000003"), gcos.CoverageOrphan, gcos.LiftFingerprintChanged},
		{"the object gone", rec(nil), onObject(), objectRow, nil, gcos.CoverageOrphan, gcos.LiftObjectGone},
		{"a group exception holds on its group", rec(nil), onGroup(), groupRow, nil, gcos.CoverageApprovedException, ""},
		{"a group exception holds on an object row of its group", rec(nil), onGroup(), objectRow, fp, gcos.CoverageApprovedException, ""},
		{"a group exception narrowed to another class", rec(nil), onGroup(func(e *gcos.ExceptionRow) { e.EntityType = gcos.Str("invoice") }),
			groupRow, nil, gcos.CoverageOrphan, gcos.LiftWithdrawn},
		{"a group exception widened to every scope still holds", rec(nil), onGroup(func(e *gcos.ExceptionRow) { e.ScopeCode = nil }),
			groupRow, nil, gcos.CoverageApprovedException, ""},
		{"an outcome without an exception is as recorded", gcos.CoverageRecord{Outcome: gcos.CoverageOrphan}, nil, groupRow, nil, gcos.CoverageOrphan, ""},
		{"no outcome stays none", gcos.CoverageRecord{}, nil, groupRow, nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, lift := tt.rec.At(now, tt.current, tt.target, tt.fp)
			if got != tt.want {
				t.Fatalf("At = %q, want %q", got, tt.want)
			}
			if (lift == nil) != (tt.lift == "") || (lift != nil && lift.Reason != tt.lift) {
				t.Fatalf("lift = %+v, want %q", lift, tt.lift)
			}
		})
	}
	// A withdrawal says what the registry's row names now: a selector it leaves open as *, a group row as this group.
	for _, tc := range []struct {
		current *gcos.ExceptionRow
		target  gcos.ExceptionTarget
		detail  string
	}{
		{onGroup(func(e *gcos.ExceptionRow) { e.ScopeCode, e.EntityType = nil, gcos.Str("invoice") }), groupRow,
			"now names scope *, class invoice, collection orders, not this row's health/order/orders"},
		{onObject(), groupRow, "now names object orders:o-1, not this group"},
	} {
		_, lift := rec(nil).At(now, tc.current, tc.target, fp)
		if lift == nil || !strings.Contains(lift.Detail, tc.detail) {
			t.Fatalf("lift %+v, want its detail to say %q", lift, tc.detail)
		}
	}
}

func TestCheckObject(t *testing.T) {
	t.Parallel()
	p := gcos.DefaultVerdictPolicy()
	ok := gcos.ObjectBirth{Object: "orders:o-1", Class: "order", Collection: "orders", LifecycleStatus: "active",
		OwnLifecycleStatus: "active", CollectionRegistered: true, ClassRegistered: true}
	with := func(edit func(*gcos.ObjectBirth)) gcos.ObjectBirth {
		b := ok
		edit(&b)
		return b
	}
	tests := []struct {
		name  string
		birth gcos.ObjectBirth
		risks []string
		want  []string // state:field=value of each problem, in order
	}{
		{"a well-formed object", ok, []string{"write_high", "write_high"}, nil},
		{"a parent with no birth", with(func(b *gcos.ObjectBirth) { b.ParentCode = gcos.Str("p-9") }), nil,
			[]string{"birth_or_registry_missing:parent_code=p-9"}},
		{"a parent that exists", with(func(b *gcos.ObjectBirth) { b.ParentCode, b.ParentFound = gcos.Str("p-1"), true }), nil, nil},
		{"an unregistered collection and class", with(func(b *gcos.ObjectBirth) { b.CollectionRegistered, b.ClassRegistered = false, false }), nil,
			[]string{"birth_or_registry_missing:collection=orders", "birth_or_registry_missing:object_class=order"}},
		{"an odd status string", with(func(b *gcos.ObjectBirth) { b.OwnLifecycleStatus, b.LifecycleStatus = "Active ", "Active " }), nil,
			[]string{"invalid_schema:lifecycle_status=Active "}},
		{"a child's odd own status under a well-formed anchor", with(func(b *gcos.ObjectBirth) {
			b.OwnLifecycleStatus, b.ParentCode, b.ParentFound = "ACTIVE", gcos.Str("p-1"), true
		}), nil, []string{"invalid_schema:lifecycle_status=ACTIVE"}},
		{"an unheard-of risk class, named once", ok, []string{"extreme", "extreme"}, []string{"invalid_schema:risk_class=extreme"}},
		{"no risk class at all", ok, []string{gcos.UnknownRisk}, []string{"birth_or_registry_missing:risk_class=unknown"}},
		{"each distinct risk class checked, past a repeat", ok, []string{"write_high", "write_high", "extreme"},
			[]string{"invalid_schema:risk_class=extreme"}},
		{"a missing risk class and an unheard-of one", ok, []string{gcos.UnknownRisk, "extreme"},
			[]string{"birth_or_registry_missing:risk_class=unknown", "invalid_schema:risk_class=extreme"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, pr := range p.CheckObject(tt.birth, tt.risks) {
				got = append(got, string(pr.State)+":"+pr.Field+"="+pr.Value)
				if pr.Reason == "" {
					t.Fatalf("problem %+v gives no reason", pr)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("problems %q, want %q", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("problems %q, want %q", got, tt.want)
				}
			}
		})
	}
	// Without a vocabulary nothing is checked against one.
	bare := p
	bare.Vocabulary = nil
	if probs := bare.CheckObject(with(func(b *gcos.ObjectBirth) { b.OwnLifecycleStatus = "Active " }), []string{"extreme"}); len(probs) != 0 {
		t.Fatalf("a policy without a vocabulary reported %+v", probs)
	}
}

func TestVerdictPolicyVocabularyValidation(t *testing.T) {
	t.Parallel()
	for name, vocab := range map[string]map[string][]string{
		"an unknown fact":            {"colour": {"red"}},
		"input_quality is fixed":     {gcos.FactInputQuality: {"x"}},
		"a boolean has no list":      {gcos.FactCoverageRequired: {"true"}},
		"an empty list says nothing": {gcos.FactLifecycleStatus: {}},
	} {
		p := gcos.DefaultVerdictPolicy()
		p.Vocabulary = vocab
		if err := p.Validate(); gcos.ErrorCode(err) != gcos.EINVALID {
			t.Errorf("%s: Validate = %v, want EINVALID", name, err)
		}
	}
	if err := gcos.DefaultVerdictPolicy().Validate(); err != nil {
		t.Fatalf("the default policy: %v", err)
	}
}

func ptr[T any](v T) *T { return &v }
