package gcos

import (
	"slices"
	"sort"
	"time"
)

// UnscopedScope is the one implicit scope used when the responsibility-scope registry is absent (SPEC §3.1): the
// dimension degrades instead of being guessed.
const UnscopedScope = "unscoped"

// UnknownRisk is the risk class of a group whose class has no coverage profile; it is treated as high risk.
const UnknownRisk = "unknown"

// CollectionRow is one collection_registry row.
type CollectionRow struct {
	CollectionName string  `json:"collection_name"`
	CoverageStatus *string `json:"coverage_status"`
	ScopeClass     *string `json:"scope_class"`
}

// OwnershipRow is one governance_object_ownership row.
type OwnershipRow struct {
	ID             int64   `json:"id"`
	ScopeCode      string  `json:"scope_code"`
	EntityType     *string `json:"entity_type"`
	CollectionName *string `json:"collection_name"`
	OwnerRef       string  `json:"owner_ref"`
	Status         string  `json:"status"`
}

// ExceptionRow is one governance_exception row.
type ExceptionRow struct {
	ExceptionID    string     `json:"exception_id"`
	ScopeCode      *string    `json:"scope_code"`
	EntityType     *string    `json:"entity_type"`
	CollectionName *string    `json:"collection_name"`
	EntityCode     *string    `json:"entity_code"`
	ApprovalRef    *string    `json:"approval_ref"`
	ExpiresAt      *time.Time `json:"expires_at"`
	Fingerprint    *string    `json:"fingerprint"` // the excepted object's fingerprint (gcos.Fingerprint.String) it pins
	Status         string     `json:"status"`
}

// Approved reports whether the exception is approved, carries an approval reference and has not expired at now.
func (e ExceptionRow) Approved(now time.Time) bool {
	return e.Status == "approved" && e.ApprovalRef != nil && *e.ApprovalRef != "" &&
		(e.ExpiresAt == nil || now.Before(*e.ExpiresAt))
}

// Registries is the registry state GCOS derives groups, facts and rulesets from, read in one transaction. A
// registry that does not exist is marked absent (never guessed).
type Registries struct {
	Collections     map[string]CollectionRow
	Classes         map[string]*string // meta_catalog: entity_type → registry_collection
	Profile         map[string]CoverageProfileRow
	Pivots          []PivotRow
	Jurisdictions   []JurisdictionRow
	Scopes          []ScopeRow
	Ownership       []OwnershipRow
	Exceptions      []ExceptionRow
	Measurements    []MeasurementRule
	Absent          []string // absent optional registries, by table name
	profilePresent  bool
	axisPresent     bool
	scopesPresent   bool
	ownershipExists bool
}

// Optional registry table names, as reported in Registries.Absent.
const (
	TableCoverageProfile = "governance_coverage_profile"
	TablePivots          = "pivot_definitions"
	TableJurisdiction    = "law_jurisdiction"
	TableScopes          = "governance_responsibility_scope"
	TableOwnership       = "governance_object_ownership"
	TableExceptions      = "governance_exception"
)

// Finish records which optional registries are present; call it after filling the maps and slices.
func (r *Registries) Finish() {
	r.profilePresent = !slices.Contains(r.Absent, TableCoverageProfile)
	r.axisPresent = !slices.Contains(r.Absent, TablePivots) && !slices.Contains(r.Absent, TableJurisdiction)
	r.scopesPresent = !slices.Contains(r.Absent, TableScopes)
	r.ownershipExists = !slices.Contains(r.Absent, TableOwnership)
	sort.Slice(r.Ownership, func(i, j int) bool { return r.Ownership[i].ID < r.Ownership[j].ID })
	sort.Slice(r.Scopes, func(i, j int) bool { return r.Scopes[i].ScopeCode < r.Scopes[j].ScopeCode })
}

// RulesetComponents returns the components a ruleset version hashes, with absent markers.
func (r Registries) RulesetComponents(policy VerdictPolicy) RulesetComponents {
	c := RulesetComponents{Measurements: r.Measurements, Policy: policy}
	if r.profilePresent {
		for _, p := range r.Profile {
			c.CoverageProfile = append(c.CoverageProfile, p)
		}
	} else {
		c.Absent = append(c.Absent, ComponentCoverageProfile)
	}
	if r.axisPresent {
		c.Pivots, c.Jurisdictions = r.Pivots, r.Jurisdictions
	} else {
		c.Absent = append(c.Absent, ComponentAxis)
	}
	if r.scopesPresent {
		c.Scopes = r.Scopes
	} else {
		c.Absent = append(c.Absent, ComponentScopes)
	}
	return c
}

// ScopeCodes lists the scopes every object belongs to: the responsibility scopes, or the implicit "unscoped".
func (r Registries) ScopeCodes() []string { return scopeCodes(r.scopesPresent, r.Scopes) }

// ScopeCodes lists the scopes every object belongs to under a ruleset: its scope component's codes, or the
// implicit "unscoped" when the component is absent or empty (as Registries.ScopeCodes).
func (c RulesetComponents) ScopeCodes() []string {
	return scopeCodes(!c.IsAbsent(ComponentScopes), c.Scopes)
}

func scopeCodes(present bool, rows []ScopeRow) []string {
	if !present || len(rows) == 0 {
		return []string{UnscopedScope}
	}
	out := make([]string, len(rows))
	for i, s := range rows {
		out[i] = s.ScopeCode
	}
	return out
}

// AxisFamily is the class's axis family from the axis registry (the smallest when several pivots name the class,
// so the choice is deterministic), or nil.
func (r Registries) AxisFamily(class string) *string {
	var best *string
	for _, p := range r.Pivots {
		if p.EntityType != nil && *p.EntityType == class && p.AxisFamily != nil {
			if best == nil || *p.AxisFamily < *best {
				best = p.AxisFamily
			}
		}
	}
	return best
}

// OwnerScope is the owner of (scope, class, collection) by ResolveOwnership: nil when none resolves, in a
// dispute, or when the ownership registry is absent.
func (r Registries) OwnerScope(scope, class, collection string) *string {
	return ResolveOwnership(r.Ownership, scope, class, collection).Owner
}

// BaseGroup is one (class, registry, lifecycle) aggregate of births, before the scope multiplies it. Inherited
// children are counted in their anchor's base group.
type BaseGroup struct {
	ObjectClass     string
	SourceRegistry  string
	LifecycleStatus string
	Count           int64
	MaxBornAt       time.Time
	MaxID           int64
	ContentHash     Fingerprint
	// NewestXID is the 64-bit id of the youngest transaction that wrote one of its births or their anchors, as a
	// capture read it (0 unknown): the evidence that a group is unchanged between two captures.
	NewestXID int64
}

// Dimensions returns the base group's dimension tuple in each scope.
func (r Registries) Dimensions(b BaseGroup) []Dimensions {
	scopes := r.ScopeCodes()
	out := make([]Dimensions, 0, len(scopes))
	axis := r.AxisFamily(b.ObjectClass)
	for _, s := range scopes {
		d := Dimensions{
			ObjectClass:     Str(b.ObjectClass),
			SourceRegistry:  Str(b.SourceRegistry),
			AxisFamily:      axis,
			Scope:           Str(s),
			LifecycleStatus: Str(b.LifecycleStatus),
		}
		if r.ownershipExists && s != UnscopedScope {
			d.OwnerScope = r.OwnerScope(s, b.ObjectClass, b.SourceRegistry)
		}
		out = append(out, d)
	}
	return out
}

// Facts gathers what the verdict policy looks at for a group. A collection missing from collection_registry or a
// class missing from meta_catalog makes the whole group birth_or_registry_missing (needs_input).
func (r Registries) Facts(d Dimensions, memberCount int64) GroupFacts {
	f := GroupFacts{LifecycleStatus: d.LifecycleStatus, MemberCount: memberCount}
	quality := string(InputAccepted)
	class, coll := deref(d.ObjectClass), deref(d.SourceRegistry)
	c, ok := r.Collections[coll]
	if !ok {
		quality = string(InputBirthOrRegistryMissing)
	} else {
		f.CoverageStatus, f.ScopeClass = c.CoverageStatus, c.ScopeClass
	}
	if _, ok := r.Classes[class]; !ok {
		quality = string(InputBirthOrRegistryMissing)
	}
	f.InputQuality = Str(quality)
	if p, ok := r.Profile[class]; ok {
		f.Privacy, f.RiskClass, f.CoverageRequired = p.Privacy, p.RiskClass, p.CoverageRequired
	}
	return f
}

// RiskClass is the group's risk class from the coverage profile, or UnknownRisk.
func (r Registries) RiskClass(class string) string {
	if p, ok := r.Profile[class]; ok && p.RiskClass != nil && *p.RiskClass != "" {
		return *p.RiskClass
	}
	return UnknownRisk
}

// CoverageRequired is the class's coverage requirement; an unknown class fails closed to true.
func (r Registries) CoverageRequired(class string) bool {
	if p, ok := r.Profile[class]; ok && p.CoverageRequired != nil {
		return *p.CoverageRequired
	}
	return true
}

// GroupException returns an approved, unexpired exception covering a whole group (no entity_code), or nil.
func (r Registries) GroupException(d Dimensions, now time.Time) *ExceptionRow {
	for i, e := range r.Exceptions {
		if e.EntityCode != nil || !e.Approved(now) {
			continue
		}
		if matches(e.ScopeCode, d.Scope) && matches(e.EntityType, d.ObjectClass) && matches(e.CollectionName, d.SourceRegistry) {
			return &r.Exceptions[i]
		}
	}
	return nil
}

// matches treats a nil selector as a wildcard.
func matches(selector, value *string) bool {
	return selector == nil || (value != nil && *selector == *value)
}

// registryDegradations says what each optional registry's absence does to the verdicts (SPEC §3.1: the dimension
// degrades, nothing is guessed).
var registryDegradations = map[string]string{
	TableScopes:          TableScopes + ": every group is in the one implicit scope " + UnscopedScope,
	TableOwnership:       TableOwnership + ": owner_scope is null; owners resolve from the scope's default owner hint, else the council",
	TableCoverageProfile: TableCoverageProfile + ": risk is unknown and treated as high, so the gate blocks what it cannot judge",
	TablePivots:          TablePivots + ": no axis family; the axis is unregistered",
	TableJurisdiction:    TableJurisdiction + ": no axis family; the axis is unregistered",
	TableExceptions:      TableExceptions + ": no exception applies",
}

// Degradations says, for each absent optional registry that feeds the verdicts, what degrades without it; a table
// that feeds no verdict is not listed.
func Degradations(absent []string) []string {
	var out []string
	for _, t := range absent {
		if d, ok := registryDegradations[t]; ok {
			out = append(out, d)
		}
	}
	return out
}
