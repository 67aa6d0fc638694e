package postgres

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"
)

// Member counts kept by the births handoff (governance_collection_count, governance_base_count): a scan reads them
// instead of counting births, so its work follows the change, not the estate. A kept collection's counts are exact
// through the births cursor, because the handoff adds each page's births in the transaction that advances the
// cursor past them; a birth is handed off once (a replay resets the cursor, which drops every count). A change that
// can move births between base groups files a recount request instead of touching the counts, so no other
// transaction ever waits on the handoff's locks for it.

// keepCounts adds a page of births to the kept counts. It takes the collections' row locks before the page records
// or dirties any group. It first drops the counts of collections with a recount request, then adds the births of
// kept collections, and counts a collection it does not keep yet from the source through the page's last birth
// (every birth up to it has been committed and is handed off by now).
func (s *Store) keepCounts(ctx context.Context, tx pgx.Tx, births []*TailRow, anchors map[[2]string]birthBase) error {
	if len(births) == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `DELETE FROM governance_recount_request RETURNING source_registry`)
	if err != nil {
		return fmt.Errorf("take recount requests: %w", err)
	}
	requested, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("take recount requests: %w", err)
	}
	if len(requested) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM governance_collection_count WHERE source_registry = ANY($1)`, requested); err != nil {
			return fmt.Errorf("drop counts to recount: %w", err)
		}
	}
	last := tailPosition{births[0].TS, births[0].ID}
	add := map[birthBase]int64{}
	var colls []string
	seen := map[string]bool{}
	for _, r := range births {
		if last.after(r.TS, r.ID) {
			last = tailPosition{r.TS, r.ID}
		}
		b := birthBase{r.EntityType, r.CollectionName, r.Status}
		if a, ok := anchors[[2]string{r.CollectionName, r.ParentCode}]; ok && r.ParentCode != "" {
			b = a
		}
		add[b]++
		if !seen[b.coll] {
			seen[b.coll] = true
			colls = append(colls, b.coll)
		}
	}
	sort.Strings(colls)
	rows, err = tx.Query(ctx, `SELECT source_registry FROM governance_collection_count WHERE source_registry = ANY($1)
		ORDER BY source_registry FOR UPDATE`, colls)
	if err != nil {
		return fmt.Errorf("lock kept counts: %w", err)
	}
	keptList, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("lock kept counts: %w", err)
	}
	kept := map[string]bool{}
	for _, c := range keptList {
		kept[c] = true
	}
	var fresh []string
	for _, c := range colls {
		if !kept[c] {
			fresh = append(fresh, c)
		}
	}
	counts := map[birthBase]int64{}
	for b, n := range add {
		if kept[b.coll] {
			counts[b] = n
		}
	}
	if err := addBaseCounts(ctx, tx, counts); err != nil {
		return err
	}
	if len(fresh) == 0 {
		return nil
	}
	counted, err := s.memberCounts(ctx, tx, fresh, &last)
	if err != nil {
		return err
	}
	return keepCollectionCounts(ctx, tx, fresh, counted)
}

// keepCollectionCounts records the counts of collections counted from the source (a collection another
// transaction recorded meanwhile keeps that record).
func keepCollectionCounts(ctx context.Context, tx pgx.Tx, colls []string, counted map[birthBase]int64) error {
	rows, err := tx.Query(ctx, `INSERT INTO governance_collection_count (source_registry) SELECT unnest($1::text[])
		ON CONFLICT (source_registry) DO NOTHING RETURNING source_registry`, colls)
	if err != nil {
		return fmt.Errorf("keep collection counts: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("keep collection counts: %w", err)
	}
	mine := map[string]bool{}
	for _, c := range inserted {
		mine[c] = true
	}
	counts := map[birthBase]int64{}
	for b, n := range counted {
		if mine[b.coll] {
			counts[b] = n
		}
	}
	return addBaseCounts(ctx, tx, counts)
}

// addBaseCounts adds n members to each base group's kept count.
func addBaseCounts(ctx context.Context, tx pgx.Tx, counts map[birthBase]int64) error {
	if len(counts) == 0 {
		return nil
	}
	bases := make([]birthBase, 0, len(counts))
	for b := range counts {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool {
		a, b := bases[i], bases[j]
		return a.coll < b.coll || (a.coll == b.coll && (a.class < b.class || (a.class == b.class && a.status < b.status)))
	})
	colls, classes, statuses, ns := make([]string, len(bases)), make([]string, len(bases)), make([]string, len(bases)), make([]int64, len(bases))
	for i, b := range bases {
		colls[i], classes[i], statuses[i], ns[i] = b.coll, b.class, b.status, counts[b]
	}
	if _, err := tx.Exec(ctx, `INSERT INTO governance_base_count AS c (source_registry, object_class, lifecycle_status, members)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
		ON CONFLICT (source_registry, object_class, lifecycle_status) DO UPDATE SET members = c.members + EXCLUDED.members`,
		colls, classes, statuses, ns); err != nil {
		return fmt.Errorf("keep base counts: %w", err)
	}
	return nil
}

// requestRecount files a recount of collections whose births may have moved between base groups.
func requestRecount(ctx context.Context, tx pgx.Tx, colls []string, reason string) error {
	if len(colls) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO governance_recount_request (source_registry, reason) SELECT DISTINCT unnest($1::text[]), $2`,
		colls, reason); err != nil {
		return fmt.Errorf("request a recount: %w", err)
	}
	return nil
}

// keepSeedCounts records, when a backfill started the births cursor at its seed horizon, the seed's counts of the
// collections with no birth after the horizon: every birth before it is in the snapshot, so those counts are exact
// through the cursor. A collection with later births is counted by the handoff when it first hands one off.
func (s *Store) keepSeedCounts(ctx context.Context, tx pgx.Tx, snap Snapshot) error {
	through, err := s.birthsThrough(ctx, tx)
	if err != nil || through == nil {
		return err
	}
	rows, err := tx.Query(ctx, s.birthBinding().basesBornAfterSQL(), through.at, through.id)
	if err != nil {
		return fmt.Errorf("read births after the seed horizon: %w", err)
	}
	beyond := map[string]bool{}
	for rows.Next() {
		var b birthBase
		if err := rows.Scan(&b.class, &b.coll, &b.status); err != nil {
			rows.Close()
			return fmt.Errorf("read births after the seed horizon: %w", err)
		}
		beyond[b.coll] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read births after the seed horizon: %w", err)
	}
	counted := map[birthBase]int64{}
	var colls []string
	seen := map[string]bool{}
	for _, g := range snap.Groups {
		b := baseOf(g)
		if beyond[b.coll] {
			continue
		}
		counted[b] = g.MemberCount // the same in every scope
		if !seen[b.coll] {
			seen[b.coll] = true
			colls = append(colls, b.coll)
		}
	}
	sort.Strings(colls)
	return keepCollectionCounts(ctx, tx, colls, counted)
}
