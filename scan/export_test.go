package scan

import (
	"context"
	"time"
)

// PruneVerdictChanges runs the incremental loop's prune of the verdict change log once.
func (s *Stage) PruneVerdictChanges(ctx context.Context, keep time.Duration) (int64, error) {
	return s.pruneVerdictChanges(ctx, keep)
}
