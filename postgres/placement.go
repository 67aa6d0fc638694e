package postgres

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// tailPosition is a position of the births tail: every birth at or before it (born_at, id) has been handed off.
type tailPosition struct {
	at time.Time
	id int64
}

// after reports whether (at, id) lies after p.
func (p tailPosition) after(at time.Time, id int64) bool {
	return at.After(p.at) || (at.Equal(p.at) && id > p.id)
}

// birthsThrough is how far the births tail has handed births off, or nil when no births cursor holds a position
// (no intake yet, or an ordering column without a time zone).
func (s *Store) birthsThrough(ctx context.Context, tx pgx.Tx) (*tailPosition, error) {
	var at *time.Time
	var id *int64
	err := tx.QueryRow(ctx, `SELECT position_tstz, position_id FROM gov_worker_cursor WHERE source = $1 AND ts_type = 'timestamptz'`,
		BirthTailSource(s.cfg.SourceBinding).Name).Scan(&at, &id)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (at == nil || id == nil)) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the births cursor: %w", err)
	}
	return &tailPosition{*at, *id}, nil
}

// keptCountsSQL reads, in one snapshot, the births cursor's position and the counts the births handoff keeps for
// the collections $1 that have them and no pending recount request: those counts are exact through that position.
const keptCountsSQL = `
WITH cur AS (SELECT position_tstz AS at, position_id AS id FROM gov_worker_cursor WHERE source = $2 AND ts_type = 'timestamptz')
SELECT c.source_registry, b.object_class, b.lifecycle_status, b.members, (SELECT at FROM cur), (SELECT id FROM cur), statement_timestamp(),
       pg_current_snapshot()::text
FROM governance_collection_count c
LEFT JOIN governance_base_count b USING (source_registry)
WHERE c.source_registry = ANY($1)
  AND NOT EXISTS (SELECT 1 FROM governance_recount_request r WHERE r.source_registry = c.source_registry)
UNION ALL
SELECT NULL, NULL, NULL, NULL, (SELECT at FROM cur), (SELECT id FROM cur), statement_timestamp(), pg_current_snapshot()::text`

// GroupCounts is what CountGroups read.
type GroupCounts struct {
	Members map[BirthBase]int64
	// At is when the count began: the start of its first statement, so every birth committed before that instant
	// is counted (a pending mark no older than it is settled by this count, ApplyPendingMarks).
	At time.Time
	// Snapshot is the snapshot that first statement read under (pg_snapshot as text): a pending mark whose
	// transaction is visible in it committed before the count read anything, so the count includes its change.
	// Compared by time alone, a mark stamped before At by a transaction that committed after it would pass as counted.
	Snapshot string
	// Births are, per base group, the ids of the births after the births cursor the count read: the births the tail
	// had not handed off yet. A base missing from it is not known (no births cursor, or more than CountedBirthsMax).
	Births map[BirthBase][]int64
}

// CountedBirthsMax is how many births after the cursor a count records for one base group: beyond it, the marks of
// those births are settled by time (a tail lagging that far is catching up, not under a steady load).
const CountedBirthsMax = 256

// CountGroups counts the members of the claimed groups' base groups now: the counts the births handoff keeps
// (exact through the births cursor), or, for a collection it does not keep (yet), a count of the collection from
// the source through the cursor; plus, for both, the births after the cursor the tail has not handed off yet (a
// read of the (born_at, id) index over the tail's lag). Without a births cursor every birth is counted from the
// source.
func (s *Store) CountGroups(ctx context.Context, tx pgx.Tx, groups map[string]gcos.Group) (GroupCounts, error) {
	res := GroupCounts{Members: map[BirthBase]int64{}}
	if err := noJIT(ctx, tx); err != nil {
		return res, err
	}
	var colls []string
	seen := map[string]bool{}
	for _, g := range groups {
		if b := BaseOf(g); !seen[b.Coll] {
			seen[b.Coll] = true
			colls = append(colls, b.Coll)
		}
	}
	sort.Strings(colls)
	out := map[BirthBase]int64{}
	kept := map[string]bool{}
	var at *time.Time
	var id *int64
	rows, err := tx.Query(ctx, keptCountsSQL, colls, BirthTailSource(s.cfg.SourceBinding).Name)
	if err != nil {
		return res, fmt.Errorf("read kept member counts: %w", err)
	}
	for rows.Next() {
		var coll, class, status *string
		var n *int64
		if err := rows.Scan(&coll, &class, &status, &n, &at, &id, &res.At, &res.Snapshot); err != nil {
			rows.Close()
			return res, fmt.Errorf("read kept member counts: %w", err)
		}
		if coll == nil {
			continue
		}
		kept[*coll] = true
		if class != nil && status != nil && n != nil {
			out[BirthBase{*class, *coll, *status}] = *n
		}
	}
	if err := rows.Err(); err != nil {
		return res, fmt.Errorf("read kept member counts: %w", err)
	}
	var through *tailPosition
	if at != nil && id != nil {
		through = &tailPosition{*at, *id}
	} else {
		kept, out = map[string]bool{}, map[BirthBase]int64{} // kept counts mean nothing without their cursor
	}
	var uncounted []string
	for _, c := range colls {
		if !kept[c] {
			uncounted = append(uncounted, c)
		}
	}
	counts, err := s.MemberCounts(ctx, tx, uncounted, through)
	if err != nil {
		return res, err
	}
	for b, n := range counts {
		out[b] += n
	}
	res.Members = out
	if through == nil {
		return res, nil
	}
	// The births after the cursor, read by a later statement: the ids say which births not handed off yet this
	// count includes, so their pending marks are settled by it (ApplyPendingMarks).
	pending, ids, err := s.bornAfter(ctx, tx, *through, colls, true)
	if err != nil {
		return res, err
	}
	for b, n := range pending {
		out[b] += n
	}
	// Every base of the collections, not only the groups': a tick writes the other groups of a collection whose
	// count moved with its own (scan/collection.go).
	bases := map[BirthBase]bool{}
	for _, g := range groups {
		bases[BaseOf(g)] = true
	}
	for b := range out {
		bases[b] = true
	}
	res.Births = map[BirthBase][]int64{}
	for b := range bases {
		if n := pending[b]; n <= CountedBirthsMax {
			res.Births[b] = ids[b] // none read: an empty list, known
			if res.Births[b] == nil {
				res.Births[b] = []int64{}
			}
		}
	}
	return res, nil
}

// bornAfter counts the births of the collections after a tail position, by anchor base group, and lists their ids
// when withIDs.
func (s *Store) bornAfter(ctx context.Context, tx pgx.Tx, from tailPosition, colls []string, withIDs bool) (map[BirthBase]int64, map[BirthBase][]int64, error) {
	rows, err := tx.Query(ctx, s.BirthBinding().bornAfterSQL(), from.at, from.id, colls, withIDs)
	if err != nil {
		return nil, nil, fmt.Errorf("count births not handed off yet: %w", err)
	}
	defer rows.Close()
	out, ids := map[BirthBase]int64{}, map[BirthBase][]int64{}
	for rows.Next() {
		var b BirthBase
		var n int64
		var some []int64
		if err := rows.Scan(&b.Class, &b.Coll, &b.Status, &n, &some); err != nil {
			return nil, nil, fmt.Errorf("count births not handed off yet: %w", err)
		}
		out[b] += n
		ids[b] = append(ids[b], some...)
	}
	return out, ids, rows.Err()
}

// MemberCounts counts the members of every base group of the collections now, through a tail position (every
// birth when through is nil).
func (s *Store) MemberCounts(ctx context.Context, tx pgx.Tx, colls []string, through *tailPosition) (map[BirthBase]int64, error) {
	all, upTo, err := s.memberCounts(ctx, tx, colls, through)
	if through == nil {
		return all, err
	}
	return upTo, err
}

// memberCounts counts the members of every base group of the collections now, in one read: every birth, and those
// through a tail position (none when through is nil).
func (s *Store) memberCounts(ctx context.Context, tx pgx.Tx, colls []string, through *tailPosition) (all, upTo map[BirthBase]int64, err error) {
	all, upTo = map[BirthBase]int64{}, map[BirthBase]int64{}
	if len(colls) == 0 {
		return all, upTo, nil
	}
	if err := noJIT(ctx, tx); err != nil {
		return nil, nil, err
	}
	var at *time.Time
	var id *int64
	if through != nil {
		at, id = &through.at, &through.id
	}
	rows, err := tx.Query(ctx, s.BirthBinding().memberCountSQL(), colls, at, id)
	if err != nil {
		return nil, nil, fmt.Errorf("count group members: %w", err)
	}
	var b BirthBase
	var n, m int64
	if _, err := pgx.ForEachRow(rows, []any{&b.Class, &b.Coll, &b.Status, &n, &m}, func() error {
		all[b] += n
		if m > 0 {
			upTo[b] += m
		}
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("count group members: %w", err)
	}
	return all, upTo, nil
}

// noJIT turns JIT compilation off for the rest of the transaction: the counts are short scans and aggregates, on
// which JIT costs several times the query itself.
func noJIT(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return fmt.Errorf("turn jit off: %w", err)
	}
	return nil
}

// BaseOf is the base group (class, registry, lifecycle) a group belongs to.
func BaseOf(g gcos.Group) BirthBase {
	return BirthBase{Deref(g.ObjectClass), Deref(g.SourceRegistry), Deref(g.LifecycleStatus)}
}
