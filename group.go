package gcos

import (
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// Dimensions are the six values that place an object in a group (SPEC §4); nil means the value is null.
type Dimensions struct {
	ObjectClass     *string `json:"object_class"`
	SourceRegistry  *string `json:"source_registry"`
	AxisFamily      *string `json:"axis_family"`
	Scope           *string `json:"scope"`
	LifecycleStatus *string `json:"lifecycle_status"`
	OwnerScope      *string `json:"owner_scope"`
}

// values lists the dimensions in the fixed order of the canonical tuple.
func (d Dimensions) values() [6]*string {
	return [6]*string{d.ObjectClass, d.SourceRegistry, d.AxisFamily, d.Scope, d.LifecycleStatus, d.OwnerScope}
}

// CanonicalTuple is the byte string hashed into a group key. Each of the six dimensions, in the order
// object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, is encoded as
//
//	null      → "N"
//	value v   → "S" + decimal byte length of v + ":" + v
//
// and the six encodings are concatenated. Every field is self-delimiting, so no value (however many ":" or "S"
// it holds) can be confused with another split, and null ("N") differs from "" ("S0:") and from "null" ("S4:null").
// In SQL: coalesce('S' || octet_length(v) || ':' || v, 'N') per field, concatenated.
func CanonicalTuple(d Dimensions) []byte {
	var b []byte
	for _, v := range d.values() {
		if v == nil {
			b = append(b, 'N')
			continue
		}
		b = append(b, 'S')
		b = strconv.AppendInt(b, int64(len(*v)), 10)
		b = append(b, ':')
		b = append(b, *v...)
	}
	return b
}

// GroupKey is lowercase hex(sha256(CanonicalTuple(d)))[:32]: stable across processes and computable in SQL.
func GroupKey(d Dimensions) string {
	sum := sha256.Sum256(CanonicalTuple(d))
	return hex.EncodeToString(sum[:])[:32]
}

// DependsOn records what dirties a group (governance_group.depends_on): its collections, rule scopes and axis
// families.
type DependsOn struct {
	Collections  []string `json:"collections"`
	RuleScopes   []string `json:"rule_scopes"`
	AxisFamilies []string `json:"axis_families"`
}

// NewDependsOn derives a group's dependencies from its dimensions; null dimensions contribute nothing, and the
// lists are never nil so they encode as [] rather than null.
func NewDependsOn(d Dimensions) DependsOn {
	list := func(v *string) []string {
		if v == nil {
			return []string{}
		}
		return []string{*v}
	}
	return DependsOn{
		Collections:  list(d.SourceRegistry),
		RuleScopes:   list(d.Scope),
		AxisFamilies: list(d.AxisFamily),
	}
}

// Group is one row of the group-key registry: the unit of dirtying and re-evaluation.
type Group struct {
	Key string `json:"key"`
	Dimensions
	MemberCount int64     `json:"member_count"`
	DependsOn   DependsOn `json:"depends_on"`
}

// NewGroup builds a Group whose key and dependencies are derived from its dimensions, so they cannot disagree.
func NewGroup(d Dimensions, memberCount int64) Group {
	return Group{Key: GroupKey(d), Dimensions: d, MemberCount: memberCount, DependsOn: NewDependsOn(d)}
}

// Str returns a pointer to s, for writing dimension literals and optional fields.
func Str(s string) *string { return &s }

// deref returns *p, or "" for nil; for messages and comparisons where null and "" need not differ.
func deref(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}
