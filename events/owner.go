package events

import (
	"slices"
	"strings"
)

// CouncilOwner is the owner of last resort: a route that resolves to nobody, or to a dispute, escalates here.
const CouncilOwner = "GOV-COUNCIL"

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
		best, bestScore := []Ownership(nil), -1
		for _, o := range src.Ownerships {
			score, ok := ownershipMatch(q, o)
			if !ok {
				continue
			}
			switch {
			case score > bestScore:
				best, bestScore = []Ownership{o}, score
			case score == bestScore:
				best = append(best, o)
			}
		}
		owners := distinctOwners(best)
		switch len(owners) {
		case 0:
			reasons = append(reasons, "no active ownership matches")
		case 1:
			first := best[0]
			for _, o := range best[1:] {
				if o.ID < first.ID {
					first = o
				}
			}
			return ResolvedOwner{OwnerRef: owners[0], Source: OwnerFromOwnership, RowID: first.ID,
				Reason: "active ownership row of scope " + first.ScopeCode}
		default:
			return ResolvedOwner{OwnerRef: CouncilOwner, Source: OwnerFromCouncil,
				Reason: "ownership dispute between " + strings.Join(owners, ", ") + ": routed to " + CouncilOwner}
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

// ownershipMatch reports whether o can own q and how specific it is (2 per exact class or collection match).
func ownershipMatch(q OwnerQuery, o Ownership) (int, bool) {
	if !strings.EqualFold(o.Status, "active") || strings.TrimSpace(o.OwnerRef) == "" {
		return 0, false
	}
	if q.Scope != "" && o.ScopeCode != q.Scope {
		return 0, false
	}
	score := 0
	for _, f := range [][2]string{{o.EntityType, q.EntityType}, {o.CollectionName, q.CollectionName}} {
		switch {
		case f[0] == "":
		case f[0] == f[1]:
			score += 2
		default:
			return 0, false
		}
	}
	return score, true
}

func distinctOwners(rows []Ownership) []string {
	var out []string
	for _, o := range rows {
		if !slices.Contains(out, o.OwnerRef) {
			out = append(out, o.OwnerRef)
		}
	}
	slices.Sort(out)
	return out
}
