package gcos

import (
	"fmt"
	"time"
)

// An exception (M-DEF-6, doc 34 §6) suppresses a relevant object's or group's missing owner. It counts only while
// it is approved with an approval reference, only until its expires_at (judged at read time, never only when a scan
// last looked), only in its own scope, and, when it names one object, only while that object's fingerprint is the
// one the exception pins. A lapsed exception is lifted: the owner (covered) or its absence (orphan) takes over.

// Reasons an exception no longer counts.
const (
	LiftExpired            = "expired"
	LiftFingerprintChanged = "fingerprint_changed"
	LiftNotPinned          = "no_fingerprint"
	LiftObjectGone         = "object_gone"
	LiftNoScope            = "no_scope"
	LiftNotApproved        = "not_approved"
	LiftRevoked            = "revoked"   // its registry row says it was revoked
	LiftShadowed           = "shadowed"  // another exception on the same object is the one its row carries
	LiftWithdrawn          = "withdrawn" // the registry no longer holds it, or it no longer names the row
)

// ExceptionLift says why an exception stopped counting, in words a person can act on.
type ExceptionLift struct {
	ExceptionID string `json:"exception_id"`
	Reason      string `json:"reason"` // one of the Lift* constants
	Detail      string `json:"detail"`
}

// Holds reports whether the exception suppresses at now. objectFingerprint is the excepted object's fingerprint as
// read now (nil when it has no birth); it is only looked at for an exception that names one object (entity_code),
// which must pin a fingerprint. A group-wide exception (no entity_code) pins none: its fingerprint column is not
// read. The lift is nil when the exception holds.
func (e ExceptionRow) Holds(now time.Time, objectFingerprint *string) *ExceptionLift {
	lift := func(reason, detail string, args ...any) *ExceptionLift {
		return &ExceptionLift{ExceptionID: e.ExceptionID, Reason: reason, Detail: fmt.Sprintf(detail, args...)}
	}
	switch {
	case e.Status == LiftRevoked:
		return lift(LiftRevoked, "exception %s was revoked", e.ExceptionID)
	case e.Status != "approved":
		return lift(LiftNotApproved, "exception %s is %q, not approved", e.ExceptionID, e.Status)
	case e.ApprovalRef == nil || *e.ApprovalRef == "":
		return lift(LiftNotApproved, "exception %s is approved without an approval reference", e.ExceptionID)
	case e.ExpiresAt != nil && !now.Before(*e.ExpiresAt):
		return lift(LiftExpired, "exception %s expired at %s", e.ExceptionID, e.ExpiresAt.UTC().Format(time.RFC3339))
	case e.EntityCode == nil:
		return nil
	case e.ScopeCode == nil || *e.ScopeCode == "":
		return lift(LiftNoScope, "exception %s on object %s names no scope, and an exception suppresses only in its own",
			e.ExceptionID, e.objectName())
	}
	return checkPin(e.ExceptionID, e.objectName(), e.Fingerprint, objectFingerprint)
}

func (e ExceptionRow) objectName() string { return deref(e.CollectionName) + ":" + deref(e.EntityCode) }

// checkPin compares the fingerprint an object exception pins with the object's current one.
func checkPin(id, object string, pinned, current *string) *ExceptionLift {
	switch {
	case pinned == nil || *pinned == "":
		return &ExceptionLift{ExceptionID: id, Reason: LiftNotPinned,
			Detail: fmt.Sprintf("exception %s on object %s pins no fingerprint of the object", id, object)}
	case current == nil:
		return &ExceptionLift{ExceptionID: id, Reason: LiftObjectGone,
			Detail: fmt.Sprintf("exception %s names object %s, which has no birth", id, object)}
	case *pinned != *current:
		return &ExceptionLift{ExceptionID: id, Reason: LiftFingerprintChanged,
			Detail: fmt.Sprintf("object %s changed since exception %s was granted: fingerprint %s, pinned %s", object, id, *current, *pinned)}
	}
	return nil
}

// ExceptionTarget is the candidate row an exception's coverage was recorded on: its scope, its group's class and
// registry, and the object (collection:code) for an object row ("" for a group row).
type ExceptionTarget struct {
	Scope, Class, Registry string
	Object                 string
}

// HoldsFor reports whether the exception, as the registry holds it now, still suppresses on target at now: it
// holds (Holds), and it still names the target — an object exception the same object in the target's scope, a
// group exception the target's scope, class and registry (a nil selector matches any). objectFingerprint is the
// target object's fingerprint read now (nil for a group row or an object with no birth). The lift is nil when it
// holds.
func (e ExceptionRow) HoldsFor(now time.Time, t ExceptionTarget, objectFingerprint *string) *ExceptionLift {
	if lift := e.Holds(now, objectFingerprint); lift != nil {
		return lift
	}
	withdrawn := func(detail string, args ...any) *ExceptionLift {
		return &ExceptionLift{ExceptionID: e.ExceptionID, Reason: LiftWithdrawn, Detail: fmt.Sprintf(detail, args...)}
	}
	if e.EntityCode != nil {
		switch {
		case e.objectName() != t.Object:
			return withdrawn("exception %s now names object %s, not %s", e.ExceptionID, e.objectName(), nonEmptyOr(t.Object, "this group"))
		case deref(e.ScopeCode) != t.Scope:
			return withdrawn("exception %s now names scope %s, not %s", e.ExceptionID, deref(e.ScopeCode), t.Scope)
		}
		return nil
	}
	if !matches(e.ScopeCode, &t.Scope) || !matches(e.EntityType, &t.Class) || !matches(e.CollectionName, &t.Registry) {
		return withdrawn("exception %s now names scope %s, class %s, collection %s, not this row's %s/%s/%s", e.ExceptionID,
			nonEmptyOr(deref(e.ScopeCode), "*"), nonEmptyOr(deref(e.EntityType), "*"), nonEmptyOr(deref(e.CollectionName), "*"),
			t.Scope, t.Class, t.Registry)
	}
	return nil
}

func nonEmptyOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// CoverageRecord is a relevant row's coverage as its scan recorded it, with the terms of the exception it rests on
// (kept to show what was recorded; the registry's current row decides, see At).
type CoverageRecord struct {
	Outcome              CoverageOutcome // "" when none is recorded
	Owner                *string
	ExceptionID          *string
	ExceptionExpiresAt   *time.Time // nil: the exception did not expire when recorded
	ExceptionFingerprint *string    // the object fingerprint an object exception pinned when recorded
}

// At is the coverage in force at now (SPEC §12). A recorded approved_exception counts only while the exception
// registry's current row (current; nil when the row or the registry is gone) holds on the row it was recorded on
// (ExceptionRow.HoldsFor): a revocation, an expiry moved into the past, a changed scope or a broken pin stops it
// suppressing at once, with no scan, and a term recorded earlier that the registry no longer holds never counts.
// The exception is then lifted and the coverage is what a scan at now would resolve without it: covered when an
// owner resolves, orphan when none does. objectFingerprint is the target object's fingerprint read now.
func (c CoverageRecord) At(now time.Time, current *ExceptionRow, t ExceptionTarget, objectFingerprint *string) (CoverageOutcome, *ExceptionLift) {
	if c.Outcome != CoverageApprovedException {
		return c.Outcome, nil
	}
	id := deref(c.ExceptionID)
	var lift *ExceptionLift
	switch {
	case current == nil || current.ExceptionID != id:
		lift = &ExceptionLift{ExceptionID: id, Reason: LiftWithdrawn,
			Detail: fmt.Sprintf("exception %s is no longer in the exception registry", id)}
	default:
		lift = current.HoldsFor(now, t, objectFingerprint)
	}
	if lift == nil {
		return c.Outcome, nil
	}
	return ResolveCoverage(c.Owner, false), lift
}
