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
	LiftShadowed           = "shadowed" // another exception on the same object is the one its row carries
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

// CoverageRecord is a relevant row's coverage as its scan recorded it, with the terms of the exception it rests on.
type CoverageRecord struct {
	Outcome              CoverageOutcome // "" when none is recorded
	Owner                *string
	ExceptionID          *string
	ExceptionExpiresAt   *time.Time // nil: the exception does not expire
	ExceptionFingerprint *string    // the object fingerprint an object exception pins; nil for a group exception
	Object               string     // the excepted object (collection:code) of a pinned exception, for the lift's words
}

// At is the coverage in force at now (SPEC §12). A recorded approved_exception counts only until the exception's
// expires_at and, when it pins the excepted object's fingerprint, only while objectFingerprint (the object's
// fingerprint read now; nil when it has no birth) matches. Otherwise the exception is lifted and the coverage is
// what a scan at now would resolve without it: covered when an owner resolves, orphan when none does.
func (c CoverageRecord) At(now time.Time, objectFingerprint *string) (CoverageOutcome, *ExceptionLift) {
	if c.Outcome != CoverageApprovedException {
		return c.Outcome, nil
	}
	id := deref(c.ExceptionID)
	var lift *ExceptionLift
	switch {
	case c.ExceptionExpiresAt != nil && !now.Before(*c.ExceptionExpiresAt):
		lift = &ExceptionLift{ExceptionID: id, Reason: LiftExpired,
			Detail: fmt.Sprintf("exception %s expired at %s", id, c.ExceptionExpiresAt.UTC().Format(time.RFC3339))}
	case c.ExceptionFingerprint != nil:
		lift = checkPin(id, c.Object, c.ExceptionFingerprint, objectFingerprint)
	}
	if lift == nil {
		return c.Outcome, nil
	}
	return ResolveCoverage(c.Owner, false), lift
}
