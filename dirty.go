package gcos

import (
	"slices"
	"strings"
)

// ValidDirtyReason reports whether reason is one a dirty mark may carry: handoff:<kind> for one of the ten kinds,
// or one of the shared reasons of SPEC §8.
func ValidDirtyReason(reason string) bool {
	if kind, ok := strings.CutPrefix(reason, "handoff:"); ok {
		return slices.Contains(ChangeKinds, ChangeKind(kind))
	}
	return slices.Contains([]string{DirtyAxis, DirtyRulesetBump, DirtyAuthority, DirtySnapshotDrift, DirtyTTL, DirtyInput}, reason)
}

// MembershipDirtyReasons are the dirty reasons that say only that a group's membership changed: a birth joined
// it, or a retirement (retire, supersede, merge) moved an object out of one group and into another. No verdict
// rests on membership (GroupFacts.MemberCount reaches no fact a policy may name), so a row dirty for such a reason
// alone keeps its verdict until the scan refreshes its counts (SPEC §12: churn elsewhere blocks no write). The
// object that moved is judged on the group it joined, whose verdict, like any group's, is its dimensions' (and
// blocks while that group has none yet). A mark for any other reason replaces it, so it never hides one (postgres'
// mark-dirty statement).
var MembershipDirtyReasons = []string{"handoff:" + string(ChangeObjectBorn), "handoff:" + string(ChangeObjectRetired)}

// MembershipOnly reports whether a row dirty for reason is dirty for its membership alone.
func MembershipOnly(reason *string) bool {
	return reason != nil && slices.Contains(MembershipDirtyReasons, *reason)
}

// InvalidationStorm reports whether a tick of the tail that marked dirtied groups dirty, of groups in all, is an
// invalidation storm: more than fraction of all groups at once (the seeds' rule, a rate). A large standing dirty set is no
// storm by itself: a wide ruleset activation dirties every group it changes without a tick of the intake.
func InvalidationStorm(dirtied, groups int64, fraction float64) bool {
	return overShare(dirtied, groups, fraction)
}

// StormDraining reports whether an open storm's throttle still holds: while more than fraction of all groups stay
// dirty the scan takes at most its storm batch per tick, and once the dirty set is back under it the storm ends.
func StormDraining(dirty, groups int64, fraction float64) bool {
	return overShare(dirty, groups, fraction)
}

func overShare(n, groups int64, fraction float64) bool {
	return groups > 0 && float64(n) > fraction*float64(groups)
}
