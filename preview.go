package gcos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// An impact preview (SPEC §8) answers "what would this governance change flip?" before anyone makes it: the
// proposed changes are applied to a copy of the registries an evaluation reads, and the groups they route to are
// judged twice, as they are and as they would be, by the same evaluator and gate decision. Nothing is written.

// PreviewKind names one kind of proposed change.
type PreviewKind string

// The kinds a preview takes. Each is one edit of one registry row, named as the registry names it.
const (
	PreviewOwnerAssign     PreviewKind = "owner_assign"     // a new ownership row: scope, owner_ref, and optionally entity_type, collection
	PreviewOwnerMove       PreviewKind = "owner_move"       // ownership_id moved: any of scope, owner_ref, entity_type, collection
	PreviewOwnerRevoke     PreviewKind = "owner_revoke"     // ownership_id revoked
	PreviewExceptionGrant  PreviewKind = "exception_grant"  // a new approved exception on a group selector or one object
	PreviewExceptionChange PreviewKind = "exception_change" // exception_id's terms changed: expires_at, status, approval_ref
	PreviewExceptionRevoke PreviewKind = "exception_revoke" // exception_id revoked
	PreviewCoverageStatus  PreviewKind = "coverage_status"  // a collection's coverage_status and/or scope_class changed
	PreviewObjectRetire    PreviewKind = "object_retire"    // collection:entity_code retired (status, default "retired")
	PreviewObjectSupersede PreviewKind = "object_supersede" // collection:entity_code superseded (status, default "superseded")
	PreviewObjectMerge     PreviewKind = "object_merge"     // collection:entity_code merged (status, default "merged")
	PreviewCoverageProfile PreviewKind = "coverage_profile" // entity_type's profile: any of risk_class, coverage_required, privacy (in force once a ruleset carrying it is active)
	PreviewRulesetActivate PreviewKind = "ruleset_activate" // the draft ruleset_version activated
)

// PreviewLifecycleStatus is the birth status each lifecycle kind sets unless the change names another (an estate
// whose birth registry words its lifecycle differently passes status).
var PreviewLifecycleStatus = map[PreviewKind]string{
	PreviewObjectRetire: "retired", PreviewObjectSupersede: "superseded", PreviewObjectMerge: "merged",
}

// PreviewKinds lists every kind a preview takes, in documentation order.
var PreviewKinds = []PreviewKind{
	PreviewOwnerAssign, PreviewOwnerMove, PreviewOwnerRevoke,
	PreviewExceptionGrant, PreviewExceptionChange, PreviewExceptionRevoke,
	PreviewCoverageStatus, PreviewObjectRetire, PreviewObjectSupersede, PreviewObjectMerge,
	PreviewCoverageProfile, PreviewRulesetActivate,
}

// ProposedChange is one change of a preview. Which fields a kind reads is documented with the kind; a field a
// kind does not read is refused, so a typo cannot silently preview something else.
type ProposedChange struct {
	Kind           PreviewKind `json:"kind"`
	OwnershipID    *int64      `json:"ownership_id,omitempty"`
	ExceptionID    *string     `json:"exception_id,omitempty"`
	Scope          *string     `json:"scope,omitempty"`
	EntityType     *string     `json:"entity_type,omitempty"`
	Collection     *string     `json:"collection,omitempty"`
	EntityCode     *string     `json:"entity_code,omitempty"`
	OwnerRef       *string     `json:"owner_ref,omitempty"`
	ApprovalRef    *string     `json:"approval_ref,omitempty"`
	ExpiresAt      *time.Time  `json:"expires_at,omitempty"`
	Status         *string     `json:"status,omitempty"`
	Fingerprint    *string     `json:"fingerprint,omitempty"`
	CoverageStatus *string     `json:"coverage_status,omitempty"`
	ScopeClass     *string     `json:"scope_class,omitempty"`
	RiskClass      *string     `json:"risk_class,omitempty"`
	Required       *bool       `json:"coverage_required,omitempty"`
	Privacy        *string     `json:"privacy,omitempty"`
	RulesetVersion *string     `json:"ruleset_version,omitempty"`
}

// PreviewRequest is the body of POST /v1/preview and the input of gcos preview.
type PreviewRequest struct {
	Changes []ProposedChange `json:"changes"`
	// Action is the gate action whose decisions are compared (write when empty).
	Action string `json:"action,omitempty"`
	// Sample is how many objects of each flip direction are named (PreviewSampleDefault when 0).
	Sample int `json:"sample,omitempty"`
}

// Bounds of a preview request.
const (
	PreviewMaxChanges    = 32
	PreviewSampleDefault = 5
	PreviewSampleMax     = 100
	// PreviewGroupsMax bounds the groups an answer lists one by one; the counts always cover all of them.
	PreviewGroupsMax = 200
)

// fields lists the optional fields a change sets, by JSON name.
func (c ProposedChange) fields() map[string]bool {
	set := map[string]bool{}
	add := func(name string, ok bool) {
		if ok {
			set[name] = true
		}
	}
	add("ownership_id", c.OwnershipID != nil)
	add("exception_id", c.ExceptionID != nil)
	add("scope", c.Scope != nil)
	add("entity_type", c.EntityType != nil)
	add("collection", c.Collection != nil)
	add("entity_code", c.EntityCode != nil)
	add("owner_ref", c.OwnerRef != nil)
	add("approval_ref", c.ApprovalRef != nil)
	add("expires_at", c.ExpiresAt != nil)
	add("status", c.Status != nil)
	add("fingerprint", c.Fingerprint != nil)
	add("coverage_status", c.CoverageStatus != nil)
	add("scope_class", c.ScopeClass != nil)
	add("risk_class", c.RiskClass != nil)
	add("coverage_required", c.Required != nil)
	add("privacy", c.Privacy != nil)
	add("ruleset_version", c.RulesetVersion != nil)
	return set
}

// previewFields are, per kind, the fields it requires and the ones it may also set.
var previewFields = map[PreviewKind]struct{ required, optional []string }{
	PreviewOwnerAssign:     {[]string{"scope", "owner_ref"}, []string{"entity_type", "collection"}},
	PreviewOwnerMove:       {[]string{"ownership_id"}, []string{"scope", "owner_ref", "entity_type", "collection"}},
	PreviewOwnerRevoke:     {[]string{"ownership_id"}, nil},
	PreviewExceptionGrant:  {[]string{"approval_ref"}, []string{"exception_id", "scope", "entity_type", "collection", "entity_code", "expires_at", "fingerprint"}},
	PreviewExceptionChange: {[]string{"exception_id"}, []string{"expires_at", "status", "approval_ref"}},
	PreviewExceptionRevoke: {[]string{"exception_id"}, nil},
	PreviewCoverageStatus:  {[]string{"collection"}, []string{"coverage_status", "scope_class"}},
	PreviewObjectRetire:    {[]string{"collection", "entity_code"}, []string{"status"}},
	PreviewObjectSupersede: {[]string{"collection", "entity_code"}, []string{"status"}},
	PreviewObjectMerge:     {[]string{"collection", "entity_code"}, []string{"status"}},
	PreviewCoverageProfile: {[]string{"entity_type"}, []string{"risk_class", "coverage_required", "privacy"}},
	PreviewRulesetActivate: {[]string{"ruleset_version"}, nil},
}

// Validate checks the request's shape before anything is read: known kinds, each with the fields it needs and
// none it does not read, at most PreviewMaxChanges changes, a known action and sample.
func (r *PreviewRequest) Validate() error {
	switch {
	case len(r.Changes) == 0:
		return Errorf(EINVALID, "a preview needs at least one change in changes")
	case len(r.Changes) > PreviewMaxChanges:
		return Errorf(EINVALID, "a preview takes at most %d changes, not %d", PreviewMaxChanges, len(r.Changes))
	}
	if r.Action == "" {
		r.Action = ActionWrite
	}
	if r.Action != ActionWrite && r.Action != ActionRead {
		return Errorf(EINVALID, "action %s is not one of write, read", quoteInput(r.Action))
	}
	switch {
	case r.Sample == 0:
		r.Sample = PreviewSampleDefault
	case r.Sample < 0 || r.Sample > PreviewSampleMax:
		return Errorf(EINVALID, "sample %d is outside 1..%d", r.Sample, PreviewSampleMax)
	}
	for i, c := range r.Changes {
		spec, ok := previewFields[c.Kind]
		if !ok {
			names := make([]string, len(PreviewKinds))
			for j, k := range PreviewKinds {
				names[j] = string(k)
			}
			return Errorf(EINVALID, "changes[%d]: unknown kind %s (want one of %s)", i, quoteInput(string(c.Kind)), strings.Join(names, ", "))
		}
		set := c.fields()
		for _, f := range spec.required {
			if !set[f] {
				return Errorf(EINVALID, "changes[%d] (%s): %s is required", i, c.Kind, f)
			}
			delete(set, f)
		}
		for _, f := range spec.optional {
			delete(set, f)
		}
		if len(set) > 0 {
			return Errorf(EINVALID, "changes[%d] (%s) does not take %s", i, c.Kind, strings.Join(slices.Sorted(maps.Keys(set)), ", "))
		}
		for name, v := range map[string]*string{"scope": c.Scope, "owner_ref": c.OwnerRef, "entity_type": c.EntityType,
			"collection": c.Collection, "entity_code": c.EntityCode, "exception_id": c.ExceptionID, "approval_ref": c.ApprovalRef,
			"status": c.Status, "fingerprint": c.Fingerprint, "coverage_status": c.CoverageStatus, "scope_class": c.ScopeClass,
			"risk_class": c.RiskClass, "privacy": c.Privacy, "ruleset_version": c.RulesetVersion} {
			if v != nil && strings.TrimSpace(*v) == "" {
				return Errorf(EINVALID, "changes[%d] (%s): %s is empty", i, c.Kind, name)
			}
		}
		switch {
		case c.Kind == PreviewOwnerMove && len(c.fields()) == 1:
			return Errorf(EINVALID, "changes[%d] (owner_move) moves nothing: set scope, owner_ref, entity_type or collection", i)
		case c.Kind == PreviewExceptionChange && len(c.fields()) == 1:
			return Errorf(EINVALID, "changes[%d] (exception_change) changes nothing: set expires_at, status or approval_ref", i)
		case c.Kind == PreviewCoverageStatus && len(c.fields()) == 1:
			return Errorf(EINVALID, "changes[%d] (coverage_status) changes nothing: set coverage_status or scope_class", i)
		case c.Kind == PreviewCoverageProfile && len(c.fields()) == 1:
			return Errorf(EINVALID, "changes[%d] (coverage_profile) changes nothing: set risk_class, coverage_required or privacy", i)
		case c.Kind == PreviewRulesetActivate && slices.ContainsFunc(r.Changes[:i], func(d ProposedChange) bool { return d.Kind == PreviewRulesetActivate }):
			return Errorf(EINVALID, "changes[%d]: a preview activates at most one ruleset", i)
		case c.Kind == PreviewExceptionGrant && c.EntityCode != nil && (c.Collection == nil || c.Scope == nil):
			return Errorf(EINVALID, "changes[%d] (exception_grant) on object %s needs its collection and scope: an object exception suppresses only in its own scope", i, quoteInput(*c.EntityCode))
		case c.Kind == PreviewExceptionGrant && c.EntityCode == nil && c.Fingerprint != nil:
			return Errorf(EINVALID, "changes[%d] (exception_grant): fingerprint pins one object; a group exception names none", i)
		}
	}
	return nil
}

// PreviewObject is an object a change names, as the preview reads it: its anchor's base and its fingerprint now.
// Found is false when it has no birth.
type PreviewObject struct {
	Collection, Code string
	Base             BaseGroup // class, registry, lifecycle (an inherited child's are its anchor's)
	Status           string    // its own birth status (a child's base follows its anchor's)
	Child            bool      // an inherited child: represented by its anchor's group
	Children         int64     // its inherited children, which follow it when its lifecycle changes
	Fingerprint      *string
	Found            bool
}

// ObjectMove is a lifecycle change of one object: its birth status becomes Status, and (unless it is a child) it
// leaves base From for base To with its children, Members objects in all.
type ObjectMove struct {
	Object   string
	Status   string
	From, To BaseGroup
	Members  int64
}

// Ref is the object's reference, collection:code.
func (o PreviewObject) Ref() string { return o.Collection + ":" + o.Code }

// AppliedChanges are the registries after a preview's changes, and what the changes route to.
type AppliedChanges struct {
	After Registries
	// Selectors are the groups the changes can affect, found the way the intake dirties them (RouteChange), on
	// both the registry rows as they are and as they would be: a moved owner affects where it was and where it goes.
	Selectors []GroupSelector
	// Objects are the objects changed exceptions name (before or after), by reference: their own rows are judged.
	Objects []string
	// Moves are the lifecycle changes, in order.
	Moves []ObjectMove
	// Assumed lists what the preview had to assume to apply a change (an exception's pinned fingerprint).
	Assumed []string
}

// ApplyChanges applies changes, in order, to a copy of regs at now (the registries under the ruleset that would be
// active: a ruleset_activate change is the caller's, which passes the draft's registries). objects holds the objects the changes'
// exceptions name (read by the caller, keyed by reference). A change naming a row that does not exist, a value no
// registry knows, or two changes of one row (a set that contradicts itself) is an EINVALID error naming it; regs
// is never modified.
func ApplyChanges(regs Registries, changes []ProposedChange, now time.Time, objects map[string]PreviewObject) (AppliedChanges, error) {
	out := AppliedChanges{After: regs}
	after := &out.After
	after.Ownership = slices.Clone(regs.Ownership)
	after.Exceptions = slices.Clone(regs.Exceptions)
	after.Collections = maps.Clone(regs.Collections)
	after.Profile = maps.Clone(regs.Profile)
	if !regs.ownershipExists {
		for i, c := range changes {
			if strings.HasPrefix(string(c.Kind), "owner_") {
				return out, Errorf(EINVALID, "changes[%d] (%s): the ownership registry %s does not exist", i, c.Kind, TableOwnership)
			}
		}
	}
	touched := map[string]int{} // row → the change that changed it
	claim := func(i int, row string) error {
		if j, ok := touched[row]; ok {
			return Errorf(EINVALID, "changes[%d] and changes[%d] both change %s: a preview applies each row's change once", j, i, row)
		}
		touched[row] = i
		return nil
	}
	authority := func(scope, class, coll *string) {
		r, _ := RouteChange(ChangeSubject{Kind: ChangeAuthority, Scope: deref(scope), Class: deref(class), Collection: deref(coll)})
		out.Selectors = append(out.Selectors, r.Selectors...)
	}
	scopes := regs.ScopeCodes()
	checkSelectors := func(i int, c ProposedChange, scope, class, coll *string) error {
		switch {
		case scope != nil && !slices.Contains(scopes, *scope):
			return Errorf(EINVALID, "changes[%d] (%s): scope %s is not a responsibility scope of the ruleset", i, c.Kind, quoteInput(*scope))
		case class != nil && !hasKey(regs.Classes, *class):
			return Errorf(EINVALID, "changes[%d] (%s): entity_type %s is not in meta_catalog", i, c.Kind, quoteInput(*class))
		case coll != nil && !hasKey(regs.Collections, *coll):
			return Errorf(EINVALID, "changes[%d] (%s): collection %s is not in collection_registry", i, c.Kind, quoteInput(*coll))
		}
		return nil
	}
	nextOwnership := int64(0)
	for _, o := range regs.Ownership {
		nextOwnership = max(nextOwnership, o.ID)
	}
	ownership := func(i int, c ProposedChange) (int, error) {
		at := slices.IndexFunc(after.Ownership, func(o OwnershipRow) bool { return o.ID == *c.OwnershipID })
		if at < 0 {
			return 0, Errorf(EINVALID, "changes[%d] (%s): ownership %d is not in %s", i, c.Kind, *c.OwnershipID, TableOwnership)
		}
		return at, claim(i, fmt.Sprintf("ownership %d", *c.OwnershipID))
	}
	exception := func(i int, c ProposedChange) (int, error) {
		at := slices.IndexFunc(after.Exceptions, func(x ExceptionRow) bool { return x.ExceptionID == *c.ExceptionID })
		if at < 0 {
			return 0, Errorf(EINVALID, "changes[%d] (%s): exception %s is not in %s", i, c.Kind, quoteInput(*c.ExceptionID), TableExceptions)
		}
		return at, claim(i, "exception "+*c.ExceptionID)
	}
	// An exception's rows route by its selectors; one naming an object also has that object's own row judged.
	exceptionRoutes := func(x ExceptionRow) {
		authority(x.ScopeCode, x.EntityType, x.CollectionName)
		if x.EntityCode != nil && x.CollectionName != nil {
			ref := *x.CollectionName + ":" + *x.EntityCode
			if !slices.Contains(out.Objects, ref) {
				out.Objects = append(out.Objects, ref)
			}
		}
	}
	for i, c := range changes {
		switch c.Kind {
		case PreviewOwnerAssign:
			if err := checkSelectors(i, c, c.Scope, c.EntityType, c.Collection); err != nil {
				return out, err
			}
			nextOwnership++
			after.Ownership = append(after.Ownership, OwnershipRow{ID: nextOwnership, ScopeCode: *c.Scope, EntityType: c.EntityType,
				CollectionName: c.Collection, OwnerRef: *c.OwnerRef, Status: "active"})
			authority(c.Scope, c.EntityType, c.Collection)
		case PreviewOwnerMove, PreviewOwnerRevoke:
			at, err := ownership(i, c)
			if err != nil {
				return out, err
			}
			o := &after.Ownership[at]
			authority(&o.ScopeCode, o.EntityType, o.CollectionName)
			if c.Kind == PreviewOwnerRevoke {
				if o.Status != "active" {
					return out, Errorf(EINVALID, "changes[%d] (owner_revoke): ownership %d is %s already", i, o.ID, quoteInput(o.Status))
				}
				o.Status = "revoked"
				continue
			}
			if err := checkSelectors(i, c, c.Scope, c.EntityType, c.Collection); err != nil {
				return out, err
			}
			if c.Scope != nil {
				o.ScopeCode = *c.Scope
			}
			o.EntityType, o.CollectionName = cmpOr(c.EntityType, o.EntityType), cmpOr(c.Collection, o.CollectionName)
			if c.OwnerRef != nil {
				o.OwnerRef = *c.OwnerRef
			}
			authority(&o.ScopeCode, o.EntityType, o.CollectionName)
		case PreviewExceptionGrant:
			if err := checkSelectors(i, c, c.Scope, c.EntityType, c.Collection); err != nil {
				return out, err
			}
			if c.ExpiresAt != nil && !now.Before(*c.ExpiresAt) {
				return out, Errorf(EINVALID, "changes[%d] (exception_grant): expires_at %s is not in the future (now %s)", i,
					c.ExpiresAt.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
			}
			id := fmt.Sprintf("proposed-%d", i+1)
			if c.ExceptionID != nil {
				id = *c.ExceptionID
			}
			if slices.ContainsFunc(after.Exceptions, func(x ExceptionRow) bool { return x.ExceptionID == id }) {
				return out, Errorf(EINVALID, "changes[%d] (exception_grant): exception %s exists already (change it with exception_change)", i, quoteInput(id))
			}
			if err := claim(i, "exception "+id); err != nil {
				return out, err
			}
			x := ExceptionRow{ExceptionID: id, ScopeCode: c.Scope, EntityType: c.EntityType, CollectionName: c.Collection,
				EntityCode: c.EntityCode, ApprovalRef: c.ApprovalRef, ExpiresAt: c.ExpiresAt, Fingerprint: c.Fingerprint, Status: "approved"}
			if x.EntityCode != nil {
				obj, ok := objects[*x.CollectionName+":"+*x.EntityCode]
				if !ok || !obj.Found {
					return out, Errorf(EINVALID, "changes[%d] (exception_grant): object %s has no birth", i, quoteInput(*x.CollectionName+":"+*x.EntityCode))
				}
				if x.EntityType != nil && *x.EntityType != obj.Base.ObjectClass {
					return out, Errorf(EINVALID, "changes[%d] (exception_grant): object %s is of class %s, not %s", i, obj.Ref(), obj.Base.ObjectClass, *x.EntityType)
				}
				if x.Fingerprint == nil {
					x.Fingerprint = obj.Fingerprint
					out.Assumed = append(out.Assumed, fmt.Sprintf("changes[%d]: the exception pins object %s's fingerprint as it is now (%s)",
						i, obj.Ref(), deref(obj.Fingerprint)))
				}
			}
			after.Exceptions = append(after.Exceptions, x)
			exceptionRoutes(x)
		case PreviewExceptionChange, PreviewExceptionRevoke:
			at, err := exception(i, c)
			if err != nil {
				return out, err
			}
			x := &after.Exceptions[at]
			exceptionRoutes(*x)
			if c.Kind == PreviewExceptionRevoke {
				if x.Status != "approved" {
					return out, Errorf(EINVALID, "changes[%d] (exception_revoke): exception %s is %s, not approved", i, x.ExceptionID, quoteInput(x.Status))
				}
				x.Status = "revoked"
				continue
			}
			if c.ExpiresAt != nil {
				x.ExpiresAt = c.ExpiresAt
			}
			if c.Status != nil {
				x.Status = *c.Status
			}
			if c.ApprovalRef != nil {
				x.ApprovalRef = c.ApprovalRef
			}
		case PreviewCoverageStatus:
			if err := checkSelectors(i, c, nil, nil, c.Collection); err != nil {
				return out, err
			}
			if err := claim(i, "collection "+*c.Collection); err != nil {
				return out, err
			}
			row := after.Collections[*c.Collection]
			row.CoverageStatus, row.ScopeClass = cmpOr(c.CoverageStatus, row.CoverageStatus), cmpOr(c.ScopeClass, row.ScopeClass)
			after.Collections[*c.Collection] = row
			r, _ := RouteChange(ChangeSubject{Kind: ChangeCollection, Registry: "collection", Code: *c.Collection})
			out.Selectors = append(out.Selectors, r.Selectors...)
		case PreviewCoverageProfile:
			row, ok := after.Profile[*c.EntityType]
			if !ok {
				return out, Errorf(EINVALID, "changes[%d] (coverage_profile): class %s has no row in %s", i, quoteInput(*c.EntityType), TableCoverageProfile)
			}
			if err := claim(i, "coverage profile "+*c.EntityType); err != nil {
				return out, err
			}
			row.RiskClass, row.Privacy = cmpOr(c.RiskClass, row.RiskClass), cmpOr(c.Privacy, row.Privacy)
			if c.Required != nil {
				row.CoverageRequired = c.Required
			}
			after.Profile[*c.EntityType] = row
			out.Selectors = append(out.Selectors, GroupSelector{ObjectClass: Str(*c.EntityType), Reason: "coverage profile of " + *c.EntityType + " changed"})
		case PreviewRulesetActivate:
			// Applied by the caller: it passed the registries under the draft.
		case PreviewObjectRetire, PreviewObjectSupersede, PreviewObjectMerge:
			ref := *c.Collection + ":" + *c.EntityCode
			obj, ok := objects[ref]
			if !ok || !obj.Found {
				return out, Errorf(EINVALID, "changes[%d] (%s): object %s has no birth", i, c.Kind, quoteInput(ref))
			}
			if err := claim(i, "object "+ref); err != nil {
				return out, err
			}
			status := PreviewLifecycleStatus[c.Kind]
			if c.Status != nil {
				status = *c.Status
			}
			if obj.Status == status {
				return out, Errorf(EINVALID, "changes[%d] (%s): object %s is %s already", i, c.Kind, ref, quoteInput(status))
			}
			m := ObjectMove{Object: ref, Status: status, From: obj.Base, To: obj.Base}
			if !obj.Child {
				m.To.LifecycleStatus, m.Members = status, 1+obj.Children
			}
			out.Moves = append(out.Moves, m)
			if !slices.Contains(out.Objects, ref) {
				out.Objects = append(out.Objects, ref)
			}
			r, err := RouteChange(ChangeSubject{Kind: ChangeObjectRetired, Class: m.To.ObjectClass, Object: &m.To, Moved: []BaseGroup{m.From}})
			if err != nil {
				return out, err
			}
			out.Selectors = append(out.Selectors, r.Selectors...)
		}
	}
	after.Finish()
	return out, nil
}

func hasKey[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}

// cmpOr is the proposed value when one is given, else the current one.
func cmpOr(proposed, current *string) *string {
	if proposed != nil {
		return proposed
	}
	return current
}

// PreviewGroup is one group whose verdict, coverage, owner or members would change: the base and scope it judges,
// before and after (its key changes with its owner).
type PreviewGroup struct {
	Scope          string      `json:"scope"`
	ObjectClass    string      `json:"object_class"`
	SourceRegistry string      `json:"source_registry"`
	Lifecycle      string      `json:"lifecycle_status"`
	Before         GroupJudged `json:"before"`
	After          GroupJudged `json:"after"`
}

// GroupJudged is a group as one side of a preview judges it.
type GroupJudged struct {
	GroupKey  string          `json:"group_key"`
	Members   int64           `json:"members"`
	Verdict   Verdict         `json:"verdict"`
	RiskClass string          `json:"risk_class"`
	Coverage  CoverageOutcome `json:"coverage,omitempty"`
	Owner     *string         `json:"owner_scope"`
	Exception *string         `json:"exception_id,omitempty"`
	Decision  string          `json:"decision"` // the gate's decision on a member without a row of its own
}

// PreviewFlip is one object whose gate decision would flip, with the reasons on each side.
type PreviewFlip struct {
	Object string   `json:"object"`
	Before []string `json:"before"`
	After  []string `json:"after"`
}

// PreviewFlips counts the objects whose decision flips, by direction, and names the first of each.
type PreviewFlips struct {
	AllowToBlock int64         `json:"allow_to_block"`
	BlockToAllow int64         `json:"block_to_allow"`
	FirstBlocked []PreviewFlip `json:"first_allow_to_block"`
	FirstAllowed []PreviewFlip `json:"first_block_to_allow"`
}

// PreviewLedger is one scope's invariant ledger before (as stored) and after the changes (before plus their delta).
type PreviewLedger struct {
	Scope  string           `json:"scope"`
	Before Ledger           `json:"before"`
	After  Ledger           `json:"after"`
	Delta  map[Bucket]int64 `json:"delta"`
}

// PreviewReport is a preview's answer.
type PreviewReport struct {
	Changes        []ProposedChange `json:"changes"`
	Action         string           `json:"action"`
	AsOf           time.Time        `json:"as_of"`
	Token          string           `json:"token"`
	RulesetVersion string           `json:"ruleset_version"`
	// RulesetAfter is the ruleset the after side judges under: the draft a ruleset_activate change names, else
	// RulesetVersion.
	RulesetAfter string `json:"ruleset_after"`
	// AffectedGroups is how many live groups the changes route to (judged twice); AffectedObjects their members.
	AffectedGroups  int             `json:"affected_groups"`
	AffectedObjects int64           `json:"affected_objects"`
	ChangedGroups   int             `json:"changed_groups"`
	Groups          []PreviewGroup  `json:"groups"` // the first PreviewGroupsMax of ChangedGroups
	Ledgers         []PreviewLedger `json:"ledgers"`
	Flips           PreviewFlips    `json:"flips"`
	Assumed         []string        `json:"assumed"`
	Selectors       []GroupSelector `json:"selectors"`
}
