package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Member counts kept by the births handoff (governance_collection_count, governance_base_count): a scan reads them
// instead of counting births, so its work follows the change, not the estate. A kept collection's counts are exact
// through the births cursor, because the handoff adds each page's births in the transaction that advances the
// cursor past them; a birth is handed off once (a replay resets the cursor, which drops every count, or zeroes them
// for a replay from the start). A change that can move births between base groups counts its collection again
// (RecountKept), or files a recount request when another transaction holds the counts: it never waits for them.

// KeepCounts adds a page of births to the kept counts. It takes the collections' row locks before the page records
// or dirties any group. It first drops the counts of collections with a recount request, then adds the births of
// kept collections, and counts a collection it does not keep yet from the source through the page's last birth
// (every birth up to it has been committed and is handed off by now). The births of a collection a change counted
// again after the page was read (RecountKept) are placed as the source holds them now, by id: the page's rows may
// show one in the base group it has since left.
//
// A birth handed off out of cursor order (behind the cursor, or ahead of it) is not added: the counts of its
// collection are dropped instead, and a collection stays unkept while a birth handed off ahead of the cursor is
// still pending (the cursor skips that row when it gets there, so no page would add it). A scan counts an unkept
// collection from the source through the cursor, plus the births after it, which is exact either way.
func (s *Store) KeepCounts(ctx context.Context, tx pgx.Tx, page *PageCounts) error {
	if page == nil || len(page.byColl) == 0 {
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
	held, err := s.heldCollections(ctx, tx, page.outOfOrder)
	if err != nil {
		return err
	}
	if drop := append(requested, held...); len(drop) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM governance_collection_count WHERE source_registry = ANY($1)`, drop); err != nil {
			return fmt.Errorf("drop counts to recount: %w", err)
		}
	}
	var last *tailPosition
	add := map[BirthBase]int64{}
	var colls []string
	seen := map[string]bool{}
	for coll, cp := range page.byColl {
		if slices.Contains(held, coll) {
			continue // neither added to nor counted afresh (an out-of-order birth's collection is held too)
		}
		if last == nil || last.after(cp.last.at, cp.last.id) {
			last = &cp.last
		}
		for b, n := range cp.bases {
			add[b] += n
			if !seen[b.Coll] {
				seen[b.Coll] = true
				colls = append(colls, b.Coll)
			}
		}
	}
	sort.Strings(colls)
	// A collection counted again after the page was read (RecountKept, for a change that may have moved births) may
	// hold a birth of the page in another base group by now: its births are placed again, as the source holds them.
	// The recount counted through the cursor, which is not past the page while this transaction holds the row.
	rows, err = tx.Query(ctx, `SELECT source_registry, counted_at > coalesce($2::timestamptz, now()) FROM governance_collection_count
		WHERE source_registry = ANY($1) ORDER BY source_registry FOR UPDATE`, colls, rowsReadAt(ctx))
	if err != nil {
		return fmt.Errorf("lock kept counts: %w", err)
	}
	kept, recounted := map[string]bool{}, map[string]bool{}
	var coll string
	var after bool
	if _, err := pgx.ForEachRow(rows, []any{&coll, &after}, func() error {
		kept[coll], recounted[coll] = true, after
		return nil
	}); err != nil {
		return fmt.Errorf("lock kept counts: %w", err)
	}
	var fresh []string
	var reread []int64
	for _, c := range colls {
		switch {
		case !kept[c]:
			fresh = append(fresh, c)
		case recounted[c]:
			reread = append(reread, page.byColl[c].ids...)
		}
	}
	counts := map[BirthBase]int64{}
	for b, n := range add {
		if kept[b.Coll] && !recounted[b.Coll] {
			counts[b] = n
		}
	}
	if len(reread) > 0 {
		if err := s.birthBases(ctx, tx, reread, counts); err != nil {
			return err
		}
	}
	if err := addBaseCounts(ctx, tx, counts); err != nil {
		return err
	}
	if len(fresh) == 0 || last == nil {
		return nil
	}
	counted, err := s.MemberCounts(ctx, tx, fresh, last)
	if err != nil {
		return err
	}
	return keepCollectionCounts(ctx, tx, fresh, counted)
}

// PageCounts is what a page of births adds to the kept counts, worked out from its rows alone (CountPage), so it
// can be worked out before the page's transaction begins (a page read ahead).
type PageCounts struct {
	byColl     map[string]*collectionPage // by the births' collection
	outOfOrder []string                   // collections with a birth handed off out of cursor order
}

// collectionPage is the page's births of one collection: per base group (an inherited child in its anchor's), and
// the last of them in cursor order.
type collectionPage struct {
	bases map[BirthBase]int64
	last  tailPosition
	ids   []int64 // the births, to place them again after a recount
}

// CountPage counts a page of births per collection and base group; anchors are the base groups of the inherited
// children's anchors (a child without one is counted in its own).
func CountPage(births []*TailRow, anchors map[[2]string]BirthBase) *PageCounts {
	page := &PageCounts{byColl: map[string]*collectionPage{}}
	for _, r := range births {
		if r.OutOfOrder != "" && !slices.Contains(page.outOfOrder, r.CollectionName) {
			page.outOfOrder = append(page.outOfOrder, r.CollectionName)
		}
		cp := page.byColl[r.CollectionName]
		if cp == nil {
			cp = &collectionPage{bases: map[BirthBase]int64{}, last: tailPosition{r.TS, r.ID}}
			page.byColl[r.CollectionName] = cp
		}
		if cp.last.after(r.TS, r.ID) {
			cp.last = tailPosition{r.TS, r.ID}
		}
		b := BirthBase{r.EntityType, r.CollectionName, r.Status}
		if a, ok := anchors[[2]string{r.CollectionName, r.ParentCode}]; ok && r.ParentCode != "" {
			b = a
		}
		cp.bases[b]++
		cp.ids = append(cp.ids, r.ID)
	}
	return page
}

// birthBases adds the births ids to counts in the base groups the source places them in now (as memberCountSQL
// places them).
func (s *Store) birthBases(ctx context.Context, tx pgx.Tx, ids []int64, counts map[BirthBase]int64) error {
	rows, err := tx.Query(ctx, s.BirthBinding().birthBasesSQL(), ids)
	if err != nil {
		return fmt.Errorf("place births counted again: %w", err)
	}
	var b BirthBase
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&b.Class, &b.Coll, &b.Status, &n}, func() error {
		counts[b] += n
		return nil
	}); err != nil {
		return fmt.Errorf("place births counted again: %w", err)
	}
	return nil
}

type rowsReadAtKey struct{}

// WithRowsReadAt says, to the births handoff applied under ctx, that its rows were read by a transaction that began
// at t, before the handoff's own (a page read ahead). Without it they were read in the handoff's transaction.
func WithRowsReadAt(ctx context.Context, t time.Time) context.Context {
	return context.WithValue(ctx, rowsReadAtKey{}, t)
}

// rowsReadAt is when the transaction that read the rows handed off under ctx began; nil: the handoff's own.
func rowsReadAt(ctx context.Context) *time.Time {
	if t, ok := ctx.Value(rowsReadAtKey{}).(time.Time); ok {
		return &t
	}
	return nil
}

// heldCollections are the collections whose counts cannot be kept now: those of the page's births handed off out of
// cursor order, and those with a birth handed off ahead of the cursor that the cursor has not reached yet.
func (s *Store) heldCollections(ctx context.Context, tx pgx.Tx, outOfOrder []string) ([]string, error) {
	held := slices.Clone(outOfOrder)
	b := s.BirthBinding()
	rows, err := tx.Query(ctx, b.SQL(`SELECT DISTINCT t.{coll} FROM {t} t
		WHERE t.{id} = ANY ((SELECT early_ids FROM gov_worker_cursor WHERE source = $1)::bigint[])`), BirthTailSource(s.cfg.SourceBinding).Name)
	if err != nil {
		return nil, fmt.Errorf("find collections with births handed off early: %w", err)
	}
	pending, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("find collections with births handed off early: %w", err)
	}
	for _, c := range pending {
		if !slices.Contains(held, c) {
			held = append(held, c)
		}
	}
	sort.Strings(held)
	return held, nil
}

// keepCollectionCounts records the counts of collections counted from the source (a collection another
// transaction recorded meanwhile keeps that record).
func keepCollectionCounts(ctx context.Context, tx pgx.Tx, colls []string, counted map[BirthBase]int64) error {
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
	counts := map[BirthBase]int64{}
	for b, n := range counted {
		if mine[b.Coll] {
			counts[b] = n
		}
	}
	return addBaseCounts(ctx, tx, counts)
}

// addBaseCounts adds n members to each base group's kept count.
func addBaseCounts(ctx context.Context, tx pgx.Tx, counts map[BirthBase]int64) error {
	if len(counts) == 0 {
		return nil
	}
	bases := make([]BirthBase, 0, len(counts))
	for b := range counts {
		bases = append(bases, b)
	}
	sort.Slice(bases, func(i, j int) bool {
		a, b := bases[i], bases[j]
		return a.Coll < b.Coll || (a.Coll == b.Coll && (a.Class < b.Class || (a.Class == b.Class && a.Status < b.Status)))
	})
	colls, classes, statuses, ns := make([]string, len(bases)), make([]string, len(bases)), make([]string, len(bases)), make([]int64, len(bases))
	for i, b := range bases {
		colls[i], classes[i], statuses[i], ns[i] = b.Coll, b.Class, b.Status, counts[b]
	}
	if _, err := tx.Exec(ctx, `INSERT INTO governance_base_count AS c (source_registry, object_class, lifecycle_status, members)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[])
		ON CONFLICT (source_registry, object_class, lifecycle_status) DO UPDATE SET members = c.members + EXCLUDED.members`,
		colls, classes, statuses, ns); err != nil {
		return fmt.Errorf("keep base counts: %w", err)
	}
	return nil
}

// RecountKept counts coll's members again through the births cursor and keeps that count, in the transaction of a
// change that may have moved births between its base groups: the counts are exact again when it commits, so the
// scans that follow keep reading them instead of counting the collection from the source. It takes the kept counts'
// row without waiting (level 1 of LockOrder, SKIP LOCKED): while it holds it no births handoff adds to them or moves
// the cursor past a birth of coll, so the cursor it reads and the count through it agree. The new counted_at tells a
// births page read before this count that its births' base groups may be stale (KeepCounts places them again, as
// the source holds them, before adding them). It returns the collection's members now, every birth counted (what
// MemberCounts returns without a position), read by the same statement.
//
// When the counts are not kept, another transaction holds them (a births handoff applying a page of them), or no
// births cursor holds a position, it files a recount request instead (RequestRecount) and returns nil.
func (s *Store) RecountKept(ctx context.Context, tx pgx.Tx, coll, reason string) (map[BirthBase]int64, error) {
	var one int
	err := tx.QueryRow(ctx, `SELECT 1 FROM governance_collection_count WHERE source_registry = $1 FOR UPDATE SKIP LOCKED`, coll).Scan(&one)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("recount %s: lock kept counts: %w", coll, err)
	}
	var through *tailPosition
	if err == nil {
		if through, err = s.birthsThrough(ctx, tx); err != nil {
			return nil, fmt.Errorf("recount %s: %w", coll, err)
		}
	}
	if through == nil {
		return nil, RequestRecount(ctx, tx, []string{coll}, reason)
	}
	members, kept, err := s.memberCounts(ctx, tx, []string{coll}, through)
	if err != nil {
		return nil, fmt.Errorf("recount %s: %w", coll, err)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM governance_base_count WHERE source_registry = $1`, coll); err != nil {
		return nil, fmt.Errorf("recount %s: %w", coll, err)
	}
	if err := addBaseCounts(ctx, tx, kept); err != nil {
		return nil, fmt.Errorf("recount %s: %w", coll, err)
	}
	if _, err := tx.Exec(ctx, `UPDATE governance_collection_count SET counted_at = clock_timestamp() WHERE source_registry = $1`, coll); err != nil {
		return nil, fmt.Errorf("recount %s: %w", coll, err)
	}
	return members, nil
}

// RequestRecount files a recount of collections whose births may have moved between base groups.
func RequestRecount(ctx context.Context, tx pgx.Tx, colls []string, reason string) error {
	if len(colls) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO governance_recount_request (source_registry, reason) SELECT DISTINCT unnest($1::text[]), $2`,
		colls, reason); err != nil {
		return fmt.Errorf("request a recount: %w", err)
	}
	return nil
}

// KeepSeedCounts records, when a backfill started the births cursor at its seed horizon, the seed's counts of the
// collections with no birth after the horizon: every birth before it is in the snapshot, so those counts are exact
// through the cursor. A collection with later births is counted by the handoff when it first hands one off.
func (s *Store) KeepSeedCounts(ctx context.Context, tx pgx.Tx, snap Snapshot) error {
	through, err := s.birthsThrough(ctx, tx)
	if err != nil || through == nil {
		return err
	}
	rows, err := tx.Query(ctx, s.BirthBinding().basesBornAfterSQL(), through.at, through.id)
	if err != nil {
		return fmt.Errorf("read births after the seed horizon: %w", err)
	}
	beyond := map[string]bool{}
	for rows.Next() {
		var b BirthBase
		if err := rows.Scan(&b.Class, &b.Coll, &b.Status); err != nil {
			rows.Close()
			return fmt.Errorf("read births after the seed horizon: %w", err)
		}
		beyond[b.Coll] = true
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read births after the seed horizon: %w", err)
	}
	counted := map[BirthBase]int64{}
	var colls []string
	seen := map[string]bool{}
	for _, g := range snap.Groups {
		b := BaseOf(g)
		if beyond[b.Coll] {
			continue
		}
		counted[b] = g.MemberCount // the same in every scope
		if !seen[b.Coll] {
			seen[b.Coll] = true
			colls = append(colls, b.Coll)
		}
	}
	sort.Strings(colls)
	return keepCollectionCounts(ctx, tx, colls, counted)
}

// keptCountDrift compares, in a capture's transaction (one instant), the counts the births handoff keeps with the
// capture's base counts: a kept collection's counts plus its births after the cursor must equal the source's. It
// returns the collections where they differ, sorted (a change behind the tail's back, e.g. a birth deleted after
// it was handed off; or a birth behind the cursor the id sweep has not handed off yet). Collections with a pending
// recount request are not compared: they are recounted anyway.
func (s *Store) keptCountDrift(ctx context.Context, tx pgx.Tx, bases map[baseKey]*gcos.BaseGroup) ([]string, map[string]time.Time, error) {
	through, err := s.birthsThrough(ctx, tx)
	if err != nil || through == nil {
		return nil, nil, err // without a births cursor no scan reads kept counts
	}
	rows, err := tx.Query(ctx, `SELECT c.source_registry, b.object_class, b.lifecycle_status, b.members, c.counted_at
		FROM governance_collection_count c LEFT JOIN governance_base_count b USING (source_registry)
		WHERE NOT EXISTS (SELECT 1 FROM governance_recount_request r WHERE r.source_registry = c.source_registry)`)
	if err != nil {
		return nil, nil, fmt.Errorf("read kept member counts: %w", err)
	}
	kept := map[BirthBase]int64{}
	countedAt := map[string]time.Time{}
	var colls []string
	for rows.Next() {
		var coll string
		var class, status *string
		var n *int64
		var at time.Time
		if err := rows.Scan(&coll, &class, &status, &n, &at); err != nil {
			rows.Close()
			return nil, nil, fmt.Errorf("read kept member counts: %w", err)
		}
		countedAt[coll] = at
		if !slices.Contains(colls, coll) {
			colls = append(colls, coll)
		}
		if class != nil && status != nil && n != nil {
			kept[BirthBase{*class, coll, *status}] += *n
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("read kept member counts: %w", err)
	}
	after, _, err := s.bornAfter(ctx, tx, *through, colls, false)
	if err != nil {
		return nil, nil, err
	}
	for b, n := range after {
		kept[b] += n
	}
	source := map[BirthBase]int64{}
	for k, g := range bases {
		if slices.Contains(colls, k.registry) {
			source[BirthBase{k.Class, k.registry, k.lifecycle}] = g.Count
		}
	}
	var drift []string
	for _, m := range []map[BirthBase]int64{kept, source} {
		for b := range m {
			if kept[b] != source[b] && !slices.Contains(drift, b.Coll) {
				drift = append(drift, b.Coll)
			}
		}
	}
	sort.Strings(drift)
	at := make(map[string]time.Time, len(drift))
	for _, c := range drift {
		at[c] = countedAt[c]
	}
	return drift, at, nil
}

// KeptDriftSettled returns, of the collections whose kept counts differed from the snapshot's at its cut
// (Snapshot.KeptDrift), those that still do once the intake has handed off what the cut saw: a collection a change
// handed off since has filed a recount request, or has had its counts dropped or counted again, so its difference
// was in flight at the cut and is being recounted; the rest drifted behind the tail's back.
func KeptDriftSettled(ctx context.Context, tx pgx.Tx, snap Snapshot) ([]string, error) {
	if len(snap.KeptDrift) == 0 || snap.keptCountedAt == nil {
		return snap.KeptDrift, nil
	}
	colls := make([]string, 0, len(snap.KeptDrift))
	at := make([]time.Time, 0, len(snap.KeptDrift))
	for _, c := range snap.KeptDrift {
		colls, at = append(colls, c), append(at, snap.keptCountedAt[c])
	}
	rows, err := tx.Query(ctx, `
		SELECT u.coll FROM unnest($1::text[], $2::timestamptz[]) AS u(coll, at)
		JOIN governance_collection_count c ON c.source_registry = u.coll AND c.counted_at = u.at
		WHERE NOT EXISTS (SELECT 1 FROM governance_recount_request r WHERE r.source_registry = u.coll)
		ORDER BY 1`, colls, at)
	if err != nil {
		return nil, fmt.Errorf("settle kept count drift: %w", err)
	}
	still, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("settle kept count drift: %w", err)
	}
	return still, nil
}
