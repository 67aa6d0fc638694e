package scan

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// A scope's ledger counts each birth once because the live groups of a collection's bases partition its births in
// that scope (v_invariant_ledger). A birth that moves between bases (a retirement, a supersession, a new parent's
// status) leaves one group's count and joins another's: written by two transactions, the group it joined could be
// counted before the group it left, and the ledger would count that birth twice until the second one commits.
//
// Two rules keep every commit from counting a birth twice:
//
//   - Before it commits, a tick takes the count lock of each collection and scope it wrote, counts the collection
//     again and checks that the counts stored there now, its own included, add up to no more than its births
//     (checkCounts). The lock is held from the check to the commit, so every tick checks against every count
//     committed before it, and no two commits can each count the same birth.
//   - A tick that fails the check rolls back and runs again (errCountsMoved), and then writes with its own groups
//     every other live group of their collections and scopes whose stored count is above its count (movedCounts):
//     the groups births left. A row another transaction holds defers the tick's groups of that collection and
//     scope, which stay dirty for a later tick.
//
// Under a births load no stored count is above the source's and the check passes at once: the lock is held only
// for one count and one sum, so ticks do not queue behind each other's evaluations, and only a tick that meets a
// move reads the other groups of its collections.

// collScope is one collection in one scope: the births a scope's ledger partitions among the live groups of the
// collection's bases.
type collScope struct {
	coll, scope string
}

func collScopeOf(g gcos.Group) collScope {
	return collScope{postgres.Deref(g.SourceRegistry), postgres.Deref(g.Scope)}
}

// collScopes lists the distinct collections and scopes of the groups as two parallel arrays, for unnest.
func collScopes(groups map[string]gcos.Group) (colls, scopes []string) {
	seen := map[collScope]bool{}
	for _, g := range groups {
		if cs := collScopeOf(g); !seen[cs] {
			seen[cs] = true
			colls, scopes = append(colls, cs.coll), append(scopes, cs.scope)
		}
	}
	return colls, scopes
}

// storedCountsSQL lists the live groups of the collections and scopes ($1, $2) with their base and the count the
// ledger holds for them: their candidate row's under ruleset $3, or their registry row's when they have none.
const storedCountsSQL = `
SELECT g.group_key, g.object_class, g.source_registry, g.lifecycle_status, coalesce(c.member_count, g.member_count),
       c.group_key IS NOT NULL
FROM governance_group g
JOIN unnest($1::text[], $2::text[]) AS u(coll, scope) ON u.coll = g.source_registry AND u.scope = coalesce(g.scope, '')
LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = $3
WHERE g.retired_at IS NULL
ORDER BY g.group_key`

// movedCounts lists the live groups of the groups' collections and scopes, other than the tick's own, whose stored
// count is above the count (members): the groups births left, which may still count a birth the tick's groups count
// now. A group below the count (births it has not counted yet) counts nothing twice and is left to its own marks.
// It returns those with a candidate row under ruleset, for the tick to claim, and those without one, judged as
// unseeded groups. Both in group-key order.
func movedCounts(ctx context.Context, tx pgx.Tx, ruleset string, own map[string]gcos.Group,
	members map[postgres.BirthBase]int64) (seeded, unseeded []string, err error) {
	colls, scopes := collScopes(own)
	rows, err := tx.Query(ctx, storedCountsSQL, colls, scopes, ruleset)
	if err != nil {
		return nil, nil, fmt.Errorf("read the stored counts of the collections: %w", err)
	}
	var key string
	var class, coll, status *string
	var stored *int64
	var hasRow bool
	if _, err := pgx.ForEachRow(rows, []any{&key, &class, &coll, &status, &stored, &hasRow}, func() error {
		if _, mine := own[key]; mine {
			return nil
		}
		b := postgres.BirthBase{Class: postgres.Deref(class), Coll: postgres.Deref(coll), Status: postgres.Deref(status)}
		if stored == nil || *stored <= members[b] {
			return nil // it counts no birth the count found elsewhere
		}
		if hasRow {
			seeded = append(seeded, key)
		} else {
			unseeded = append(unseeded, key)
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("read the stored counts of the collections: %w", err)
	}
	return seeded, unseeded, nil
}

// errCountsMoved is checkCounts's answer when a collection and scope would count more births than it has once the
// tick commits: the tick rolls back and runs again.
var errCountsMoved = errors.New("a count committed meanwhile moved births the tick counted")

// countLocksSQL takes the count locks of the collections and scopes ($1, $2), in lock-key order, waiting: the last
// locks a tick takes (postgres.LockOrder), and their holders only read before they commit.
const countLocksSQL = `
SELECT count(pg_advisory_xact_lock(k.key))
FROM (SELECT DISTINCT hashtextextended('gcos.counts:' || u.coll || chr(31) || u.scope, 0) AS key
      FROM unnest($1::text[], $2::text[]) AS u(coll, scope) ORDER BY 1) k`

// storedSumsSQL adds up, per collection ($1) and scope, the counts the ledger holds for the live groups under
// ruleset $2 (the tick's own writes included).
const storedSumsSQL = `
SELECT g.source_registry, coalesce(g.scope, ''), sum(coalesce(c.member_count, g.member_count))::bigint
FROM governance_group g
LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = $2
WHERE g.source_registry = ANY($1) AND g.retired_at IS NULL
GROUP BY 1, 2`

// checkCounts is the tick's last step (see above): with the count locks of the collections and scopes of the groups
// it wrote held, the counts stored in each must add up to no more than the collection's births now.
func (s *Stage) checkCounts(ctx context.Context, tx pgx.Tx, ruleset string, written map[string]gcos.Group) error {
	if len(written) == 0 {
		return nil
	}
	colls, scopes := collScopes(written)
	if _, err := tx.Exec(ctx, countLocksSQL, colls, scopes); err != nil {
		return fmt.Errorf("take the count locks: %w", err)
	}
	counted, err := s.core.CountGroups(ctx, tx, written)
	if err != nil {
		return err
	}
	births := map[string]int64{}
	for b, n := range counted.Members {
		births[b.Coll] += n
	}
	wrote := map[collScope]bool{}
	for i := range colls {
		wrote[collScope{colls[i], scopes[i]}] = true
	}
	rows, err := tx.Query(ctx, storedSumsSQL, slices.Compact(slices.Sorted(slices.Values(colls))), ruleset)
	if err != nil {
		return fmt.Errorf("add up the stored counts: %w", err)
	}
	var cs collScope
	var sum int64
	var over []string
	if _, err := pgx.ForEachRow(rows, []any{&cs.coll, &cs.scope, &sum}, func() error {
		if wrote[cs] && sum > births[cs.coll] {
			over = append(over, fmt.Sprintf("%s in %q: %d counted, %d births", cs.coll, cs.scope, sum, births[cs.coll]))
		}
		return nil
	}); err != nil {
		return fmt.Errorf("add up the stored counts: %w", err)
	}
	if len(over) > 0 {
		slices.Sort(over)
		return fmt.Errorf("%w: %v", errCountsMoved, over)
	}
	return nil
}
