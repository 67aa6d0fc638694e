package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// GroupCount is the number of candidate rows under the current ruleset, re-counted at most every groupCountTTL:
// the storm rule's denominator (gcos.InvalidationStorm), which moves only when groups are born or a ruleset is
// activated. A stage keeps one; the zero value is ready.
type GroupCount struct {
	mu      sync.Mutex
	ruleset string
	n       int64
	at      time.Time
}

const groupCountTTL = 10 * time.Second

// currentGroupsSQL counts the groups of the current ruleset (none active: no row).
const currentGroupsSQL = `
SELECT cr.ruleset_version, (SELECT count(*) FROM governance_candidate_state c WHERE c.ruleset_version = cr.ruleset_version)
FROM v_current_ruleset cr`

// Current returns the current ruleset's version and its number of groups; with no current ruleset, "" and 0.
func (g *GroupCount) Current(ctx context.Context, q Querier) (string, int64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.ruleset != "" && time.Since(g.at) < groupCountTTL {
		return g.ruleset, g.n, nil
	}
	var ruleset string
	var n int64
	if err := q.QueryRow(ctx, currentGroupsSQL).Scan(&ruleset, &n); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return "", 0, fmt.Errorf("count groups: %w", err)
	}
	g.ruleset, g.n, g.at = ruleset, n, time.Now()
	return ruleset, n, nil
}
