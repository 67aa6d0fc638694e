package gcos

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
)

// Registries whose rows feed a group's verdict besides its births, as GroupInputs names them. The rule registries
// (coverage profile, axis, jurisdictions, scopes, measurements) reach verdicts only through a ruleset version:
// their drift is a new ruleset hash, not a group input.
const (
	InputCollections = "collection_registry"
	InputClasses     = "meta_catalog"
	InputOwnership   = TableOwnership
	InputExceptions  = TableExceptions
)

// GroupInputs fingerprints, per registry, the rows that feed the verdict of the group with dimensions d: its
// collection's row, its class's catalog row, the ownership rows and the exception rows that name its scope, class
// or collection. Two captures give a group the same fingerprint for a registry exactly when those rows are equal,
// so a full audit can tell which registry drifted under which groups even when no change row said so.
func (r Registries) GroupInputs(d Dimensions) map[string]string {
	class, coll := deref(d.ObjectClass), deref(d.SourceRegistry)
	out := map[string]string{}
	c, ok := r.Collections[coll]
	out[InputCollections] = inputHash(ok, c)
	catalog, ok := r.Classes[class]
	out[InputClasses] = inputHash(ok, catalog)
	if !slices.Contains(r.Absent, TableOwnership) {
		var rows []OwnershipRow
		for _, o := range r.Ownership {
			if (d.Scope == nil || o.ScopeCode == *d.Scope) && matches(o.EntityType, d.ObjectClass) && matches(o.CollectionName, d.SourceRegistry) {
				rows = append(rows, o)
			}
		}
		out[InputOwnership] = inputHash(true, rows)
	}
	if !slices.Contains(r.Absent, TableExceptions) {
		var rows []ExceptionRow
		for _, e := range r.Exceptions {
			if matches(e.ScopeCode, d.Scope) && matches(e.EntityType, d.ObjectClass) && matches(e.CollectionName, d.SourceRegistry) {
				rows = append(rows, e)
			}
		}
		out[InputExceptions] = inputHash(true, rows)
	}
	return out
}

// DriftedInputs lists the registries whose fingerprint differs between two GroupInputs of one group; a registry
// missing from either side is not compared (an older capture did not record it).
func DriftedInputs(before, after map[string]string) []string {
	var out []string
	for _, reg := range []string{InputCollections, InputClasses, InputOwnership, InputExceptions} {
		b, okB := before[reg]
		a, okA := after[reg]
		if okB && okA && a != b {
			out = append(out, reg)
		}
	}
	return out
}

func inputHash(present bool, v any) string {
	if !present {
		return "absent"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "unencodable" // cannot happen for registry rows; differs from any hash, so it reads as drift
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}
