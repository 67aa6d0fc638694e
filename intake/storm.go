package intake

import (
	"context"
	"fmt"

	"gcos"
)

// WatchStorm applies the storm rule to one tick of the tail (a pass over every source and the watched registries)
// that marked dirtied groups dirty: more than scan.storm_fraction of all groups at once raises
// group_invalidation_storm, which throttles the scan until the dirty set drains back under the same share (the scan
// stage resolves it). The rule is a rate, counted where the marks are made, so a burst the event scan drains
// before its next tick is caught all the same; marks made outside the tail (a ruleset activation's diff, stale
// expiry) are no tick of it and never count. It reports whether the tick was a storm.
func (s *Stage) WatchStorm(ctx context.Context, dirtied int64) (bool, error) {
	if dirtied == 0 {
		return false, nil
	}
	ruleset, groups, err := s.groups.Current(ctx, s.pool)
	if err != nil {
		return false, fmt.Errorf("storm rule: %w", err)
	}
	if !gcos.InvalidationStorm(dirtied, groups, s.cfg.StormFraction) {
		return false, nil
	}
	s.logger.Warn("intake: one tick dirtied more than scan.storm_fraction of all groups; the scan throttles until they drain",
		"dirtied", dirtied, "groups", groups, "threshold", s.cfg.StormFraction, "throttled_to", s.cfg.StormBatch)
	if _, err := s.core.RaiseFinding(ctx, gcos.Finding{Type: gcos.IssueGroupInvalidationStorm, Subject: gcos.StormSubject, RulesetVersion: ruleset,
		Evidence: map[string]any{"dirtied": dirtied, "groups": groups, "fraction": float64(dirtied) / float64(groups),
			"threshold": s.cfg.StormFraction, "throttled_to": s.cfg.StormBatch}}); err != nil {
		return true, fmt.Errorf("storm rule: %w", err)
	}
	return true, nil
}
