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
