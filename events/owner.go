package events

import (
	"slices"
	"strings"

	"gcos"
)

// CouncilOwner is the owner of last resort: a route that resolves to nobody, or to a dispute, escalates here.
const CouncilOwner = gcos.CouncilOwner

// Where an owner came from.
const (
	OwnerFromOwnership    = "ownership"     // an active governance_object_ownership row
	OwnerFromScopeDefault = "scope_default" // governance_responsibility_scope.default_owner_hint
	OwnerFromCouncil      = "council"       // nothing resolved, or the candidates disagreed
)

// OwnerQuery names what an owner is wanted for: a responsibility scope, an object class, a collection. Empty
// fields are unknown; an empty Scope matches every scope.
type OwnerQuery struct {
	Scope          string `json:"scope"`
	EntityType     string `json:"entity_type"`
	CollectionName string `json:"collection_name"`
}

// Ownership is one governance_object_ownership row; an empty EntityType or CollectionName is a wildcard.
type Ownership struct {
	ID             int64  `json:"id"`
	ScopeCode      string `json:"scope_code"`
	EntityType     string `json:"entity_type"`
	CollectionName string `json:"collection_name"`
	OwnerRef       string `json:"owner_ref"`
	Status         string `json:"status"`
}

// OwnerSources is what owner resolution may consult. A nil slice or map means the registry is absent (optional
// SB-2 tables): the step is skipped and said so, nothing is guessed.
type OwnerSources struct {
	Ownerships   []Ownership       // nil: governance_object_ownership absent
	ScopeDefault map[string]string // scope_code → default_owner_hint; nil: governance_responsibility_scope absent
}

// ResolvedOwner is the outcome of owner resolution.
type ResolvedOwner struct {
	OwnerRef string `json:"owner_ref"`
	Source   string `json:"source"` // ownership, scope_default, council
	Reason   string `json:"reason"` // a sentence a human can read
	RowID    int64  `json:"ownership_id,omitempty"`
}

// ResolveOwner applies the resolution order of doc 41 §41.8: an active ownership row of the scope matching the
// class and collection (the most specific match wins) → the scope's default_owner_hint → GOV-COUNCIL. Two
// different owners at the same best specificity are a dispute, and disputes route to GOV-COUNCIL; so does a scope
// whose default owner hint is empty or, with an empty Scope, scopes whose defaults disagree.
func ResolveOwner(q OwnerQuery, src OwnerSources) ResolvedOwner {
	var reasons []string
	if src.Ownerships == nil {
		reasons = append(reasons, "ownership registry absent")
	} else {
		// The ownership step is the one owner resolver coverage uses (gcos.ResolveOwnership); an empty Scope asks
		// every scope at once.
		rows := make([]gcos.OwnershipRow, len(src.Ownerships))
		for i, o := range src.Ownerships {
			rows[i] = gcos.OwnershipRow{ID: o.ID, ScopeCode: o.ScopeCode, EntityType: optional(o.EntityType),
				CollectionName: optional(o.CollectionName), OwnerRef: o.OwnerRef, Status: o.Status}
			if q.Scope == "" {
				rows[i].ScopeCode = ""
			}
		}
		res := gcos.ResolveOwnership(rows, q.Scope, q.EntityType, q.CollectionName)
		switch {
		case res.Disputed:
			return ResolvedOwner{OwnerRef: CouncilOwner, Source: OwnerFromCouncil,
				Reason: "ownership dispute between " + strings.Join(res.Claimants, ", ") + ": routed to " + CouncilOwner}
		case res.Owner != nil:
			scope := q.Scope
			for _, o := range src.Ownerships {
				if o.ID == res.RowID {
					scope = o.ScopeCode
				}
			}
			return ResolvedOwner{OwnerRef: *res.Owner, Source: OwnerFromOwnership, RowID: res.RowID,
				Reason: "active ownership row of scope " + scope}
		default:
			reasons = append(reasons, "no active ownership matches")
		}
	}
	if src.ScopeDefault == nil {
		reasons = append(reasons, "responsibility scope registry absent")
	} else {
		var hints []string
		for scope, hint := range src.ScopeDefault {
			if (q.Scope == "" || scope == q.Scope) && strings.TrimSpace(hint) != "" && !slices.Contains(hints, hint) {
				hints = append(hints, hint)
			}
		}
		slices.Sort(hints)
		switch len(hints) {
		case 0:
			reasons = append(reasons, "no default owner hint for the scope")
		case 1:
			return ResolvedOwner{OwnerRef: hints[0], Source: OwnerFromScopeDefault,
				Reason: strings.Join(append(reasons, "default owner hint of the scope"), "; ")}
		default:
			reasons = append(reasons, "default owner hints disagree ("+strings.Join(hints, ", ")+")")
		}
	}
	return ResolvedOwner{OwnerRef: CouncilOwner, Source: OwnerFromCouncil,
		Reason: strings.Join(append(reasons, "escalated to "+CouncilOwner), "; ")}
}

// optional is a wildcard selector ("") as NULL.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
