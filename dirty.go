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
