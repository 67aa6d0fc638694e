package gcos

import (
	"slices"
	"strings"
)

// CouncilOwner is the owner of last resort: an owner question that resolves to nobody, or to a dispute, goes here.
const CouncilOwner = "GOV-COUNCIL"

// OwnerResolution is who owns (scope, class, collection) by the ownership registry.
type OwnerResolution struct {
	Owner     *string  // nil: no owner (no row matches, or the best rows disagree)
	RowID     int64    // the row the owner comes from (the lowest id among agreeing rows); 0 when none
	Disputed  bool     // the most specific matching rows name different owners
	Claimants []string // in a dispute, the owners they name, sorted
}

// ResolveOwnership is the one owner resolver: coverage (a group's owner_scope), the reference evaluator and event
// routing all ask it. Its rules:
//
//  1. Only active rows (status "active") with a non-empty owner_ref, of the scope asked about, count.
//  2. A row matches when each selector it sets equals the question's: entity_type the class, collection_name the
//     collection. A selector it leaves NULL matches anything.
//  3. The most specific matching rows win: class and collection (3) over class alone (2) over collection alone (1)
//     over neither, a scope-wide owner (0). A row naming the class is more specific than one naming its collection:
//     a class is governed wherever it is born.
//  4. If the winning rows name one owner, that is the owner (from the lowest id). If they name different owners,
//     it is a dispute: no owner (a dispute is never coverage: fail closed), and the claimants are listed, for the
//     owner-dispute finding routed to the council.
//  5. No matching row: no owner.
func ResolveOwnership(rows []OwnershipRow, scope, class, collection string) OwnerResolution {
	best, bestScore := []OwnershipRow(nil), -1
	for _, o := range rows {
		score, ok := ownershipScore(o, scope, class, collection)
		switch {
		case !ok:
		case score > bestScore:
			best, bestScore = []OwnershipRow{o}, score
		case score == bestScore:
			best = append(best, o)
		}
	}
	if len(best) == 0 {
		return OwnerResolution{}
	}
	var owners []string
	first := best[0]
	for _, o := range best {
		if !slices.Contains(owners, o.OwnerRef) {
			owners = append(owners, o.OwnerRef)
		}
		if o.ID < first.ID {
			first = o
		}
	}
	if len(owners) > 1 {
		slices.Sort(owners)
		return OwnerResolution{Disputed: true, Claimants: owners}
	}
	return OwnerResolution{Owner: Str(first.OwnerRef), RowID: first.ID}
}

// ownershipScore reports whether o can own (scope, class, collection) and how specific it is (rule 3).
func ownershipScore(o OwnershipRow, scope, class, collection string) (int, bool) {
	if o.Status != "active" || strings.TrimSpace(o.OwnerRef) == "" || o.ScopeCode != scope {
		return 0, false
	}
	score := 0
	if o.EntityType != nil {
		if *o.EntityType != class {
			return 0, false
		}
		score += 2
	}
	if o.CollectionName != nil {
		if *o.CollectionName != collection {
			return 0, false
		}
		score++
	}
	return score, true
}
