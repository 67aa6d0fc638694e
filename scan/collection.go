package scan

import (
	"context"
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
// So a tick that writes a member count in a collection and scope first holds the group row of every live group
// there (no other tick can write a count of them meanwhile), then counts, and writes with its own groups every
// other group of the collection and scope whose count the count moved. Every count of a collection and scope the
// tick leaves alone already equals the tick's count, and the ones it writes equal it when it commits: no birth is
// counted in two groups, at any commit. Rows another transaction holds defer the tick's groups of that collection
// and scope (they stay dirty for a later tick), as everywhere a tick locks beyond its claim (postgres.LockOrder).

// collScope is one collection in one scope: the births a scope's ledger partitions among the live groups of the
// collection's bases.
type collScope struct {
	coll, scope string
}

func collScopeOf(g gcos.Group) collScope {
	return collScope{postgres.Deref(g.SourceRegistry), postgres.Deref(g.Scope)}
}

// holdCollectionsSQL locks, without waiting, the group rows of every live group of the collections and scopes
// ($1, $2), in group-key order, and lists those groups with whether this transaction now holds the row.
const holdCollectionsSQL = `
WITH cs AS (SELECT DISTINCT u.coll, u.scope FROM unnest($1::text[], $2::text[]) AS u(coll, scope)),
held AS MATERIALIZED (
    SELECT g.group_key FROM governance_group g JOIN cs ON cs.coll = g.source_registry AND cs.scope = coalesce(g.scope, '')
    WHERE g.retired_at IS NULL
    ORDER BY g.group_key
    FOR NO KEY UPDATE OF g SKIP LOCKED
)
SELECT g.group_key, g.source_registry, coalesce(g.scope, ''), g.group_key IN (SELECT group_key FROM held)
FROM governance_group g JOIN cs ON cs.coll = g.source_registry AND cs.scope = coalesce(g.scope, '')
WHERE g.retired_at IS NULL`

// holdCollections takes the group rows of every live group of the groups' collections and scopes. It returns the
// live groups of each collection and scope it holds, and those it could not hold (another transaction holds a row).
func holdCollections(ctx context.Context, tx pgx.Tx, groups map[string]gcos.Group) (live map[collScope][]string, busy map[collScope]bool, err error) {
	var colls, scopes []string
	seen := map[collScope]bool{}
	for _, g := range groups {
		if cs := collScopeOf(g); !seen[cs] {
			seen[cs] = true
			colls, scopes = append(colls, cs.coll), append(scopes, cs.scope)
		}
	}
	rows, err := tx.Query(ctx, holdCollectionsSQL, colls, scopes)
	if err != nil {
		return nil, nil, fmt.Errorf("hold the groups of the collections: %w", err)
	}
	live, busy = map[collScope][]string{}, map[collScope]bool{}
	var key string
	var cs collScope
	var mine bool
	if _, err := pgx.ForEachRow(rows, []any{&key, &cs.coll, &cs.scope, &mine}, func() error {
		live[cs] = append(live[cs], key)
		if !mine {
			busy[cs] = true
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("hold the groups of the collections: %w", err)
	}
	for cs := range busy {
		delete(live, cs)
	}
	return live, busy, nil
}

// storedCountsSQL reads the count the ledger holds for each group ($1): its candidate row's under ruleset $2, or
// its registry row's when it has none (v_invariant_ledger), with its base.
const storedCountsSQL = `
SELECT g.group_key, g.object_class, g.source_registry, g.lifecycle_status, coalesce(c.member_count, g.member_count),
       c.group_key IS NOT NULL
FROM governance_group g
LEFT JOIN governance_candidate_state c ON c.group_key = g.group_key AND c.ruleset_version = $2
WHERE g.group_key = ANY($1)
ORDER BY g.group_key`

// movedCounts lists the live groups of the held collections and scopes, other than the tick's own, whose stored
// count differs from the count (members): those with a candidate row under ruleset, for the tick to claim, and
// those without one, judged as unseeded groups. Both in group-key order.
func movedCounts(ctx context.Context, tx pgx.Tx, ruleset string, live map[collScope][]string, own map[string]gcos.Group,
	members map[postgres.BirthBase]int64) (seeded, unseeded []string, err error) {
	var others []string
	for _, keys := range live {
		for _, k := range keys {
			if _, mine := own[k]; !mine {
				others = append(others, k)
			}
		}
	}
	if len(others) == 0 {
		return nil, nil, nil
	}
	rows, err := tx.Query(ctx, storedCountsSQL, others, ruleset)
	if err != nil {
		return nil, nil, fmt.Errorf("read the stored counts of the collections: %w", err)
	}
	var key string
	var class, coll, status *string
	var stored *int64
	var hasRow bool
	if _, err := pgx.ForEachRow(rows, []any{&key, &class, &coll, &status, &stored, &hasRow}, func() error {
		b := postgres.BirthBase{Class: postgres.Deref(class), Coll: postgres.Deref(coll), Status: postgres.Deref(status)}
		if stored != nil && *stored == members[b] {
			return nil
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
	slices.Sort(seeded)
	slices.Sort(unseeded)
	return seeded, unseeded, nil
}
