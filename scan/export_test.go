package scan

import (
	"context"
	"time"

	"gcos/postgres"
)

// MaintainVerdictChanges runs the incremental loop's maintenance of the verdict change log once.
func (s *Stage) MaintainVerdictChanges(ctx context.Context, keep, width time.Duration) (postgres.LogMaintained, error) {
	return s.maintainVerdictChanges(ctx, keep, width)
}
