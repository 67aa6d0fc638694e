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

// placement is where a scan found the members of the groups it claimed, counted now: a scan judges a group on its
// members as they are, not as the last snapshot counted them, and moves them to the group their dimensions name now
// (SPEC §4, §8; doc 40 §40.8).
type placement struct {
	live    map[string]gcos.Group // claimed groups that still hold members, with the count now
	retired map[string]string     // claimed groups whose source is gone → why: "empty" or "moved"
	rekeyed map[string]string     // a moved group → the group of the same base and scope its members are in now
	moved   []gcos.Group          // those groups, when the tick did not claim them itself
}

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

// placeGroups counts the members of the claimed groups now (countGroups) and decides, for each claimed group,
// whether it is still the group its members belong to in its scope: the key the registries give its base (class,
// registry, lifecycle) and scope now must be its own, and the base must have members. Otherwise it is retired, and
// the current group of its base and scope, when that has members, is judged in its place.
func (s *Store) placeGroups(ctx context.Context, tx pgx.Tx, ev *Evaluator, groups map[string]gcos.Group) (placement, error) {
	p := placement{live: map[string]gcos.Group{}, retired: map[string]string{}, rekeyed: map[string]string{}}
	counts, err := s.countGroups(ctx, tx, groups)
	if err != nil {
		return p, err
	}
	current := map[BirthBase]map[string]gcos.Dimensions{}
	for _, g := range groups {
		b := baseOf(g)
		if _, ok := current[b]; ok {
			continue
		}
		byScope := map[string]gcos.Dimensions{}
		for _, d := range ev.regs.Dimensions(gcos.BaseGroup{ObjectClass: b.Class, SourceRegistry: b.Coll, LifecycleStatus: b.Status}) {
			byScope[Deref(d.Scope)] = d
		}
		current[b] = byScope
	}
	queued := map[string]bool{}
	for key, g := range groups {
		n := counts[baseOf(g)]
		d, ok := current[baseOf(g)][Deref(g.Scope)]
		cur := gcos.NewGroup(d, n)
		switch {
		case ok && n > 0 && cur.Key == key:
			g.MemberCount = n
			p.live[key] = g
		case ok && n > 0:
			p.retired[key], p.rekeyed[key] = "moved", cur.Key
			if _, claimed := groups[cur.Key]; !claimed && !queued[cur.Key] {
				queued[cur.Key] = true
				p.moved = append(p.moved, cur)
			}
		default:
			p.retired[key] = "empty"
		}
	}
	sort.Slice(p.moved, func(i, j int) bool { return p.moved[i].Key < p.moved[j].Key })
	return p, nil
}

// keptCountsSQL reads, in one snapshot, the births cursor's position and the counts the births handoff keeps for
// the collections $1 that have them and no pending recount request: those counts are exact through that position.
const keptCountsSQL = `
WITH cur AS (SELECT position_tstz AS at, position_id AS id FROM gov_worker_cursor WHERE source = $2 AND ts_type = 'timestamptz')
SELECT c.source_registry, b.object_class, b.lifecycle_status, b.members, (SELECT at FROM cur), (SELECT id FROM cur)
FROM governance_collection_count c
LEFT JOIN governance_base_count b USING (source_registry)
WHERE c.source_registry = ANY($1)
  AND NOT EXISTS (SELECT 1 FROM governance_recount_request r WHERE r.source_registry = c.source_registry)
UNION ALL
SELECT NULL, NULL, NULL, NULL, (SELECT at FROM cur), (SELECT id FROM cur)`

// countGroups counts the members of the claimed groups' base groups now: the counts the births handoff keeps
// (exact through the births cursor), or, for a collection it does not keep (yet), a count of the collection from
// the source through the cursor; plus, for both, the births after the cursor the tail has not handed off yet (a
// read of the (born_at, id) index over the tail's lag). Without a births cursor every birth is counted from the
// source.
func (s *Store) countGroups(ctx context.Context, tx pgx.Tx, groups map[string]gcos.Group) (map[BirthBase]int64, error) {
	if err := noJIT(ctx, tx); err != nil {
		return nil, err
	}
	var colls []string
	seen := map[string]bool{}
	for _, g := range groups {
		if b := baseOf(g); !seen[b.Coll] {
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
		return nil, fmt.Errorf("read kept member counts: %w", err)
	}
	for rows.Next() {
		var coll, class, status *string
		var n *int64
		if err := rows.Scan(&coll, &class, &status, &n, &at, &id); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read kept member counts: %w", err)
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
		return nil, fmt.Errorf("read kept member counts: %w", err)
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
		return nil, err
	}
	for b, n := range counts {
		out[b] += n
	}
	if through == nil {
		return out, nil
	}
	pending, err := s.bornAfter(ctx, tx, *through, colls)
	if err != nil {
		return nil, err
	}
	for b, n := range pending {
		out[b] += n
	}
	return out, nil
}

// bornAfter counts the births of the collections after a tail position, by anchor base group.
func (s *Store) bornAfter(ctx context.Context, tx pgx.Tx, from tailPosition, colls []string) (map[BirthBase]int64, error) {
	rows, err := tx.Query(ctx, s.BirthBinding().bornAfterSQL(), from.at, from.id, colls)
	if err != nil {
		return nil, fmt.Errorf("count births not handed off yet: %w", err)
	}
	defer rows.Close()
	out := map[BirthBase]int64{}
	for rows.Next() {
		var b BirthBase
		var n int64
		if err := rows.Scan(&b.Class, &b.Coll, &b.Status, &n); err != nil {
			return nil, fmt.Errorf("count births not handed off yet: %w", err)
		}
		out[b] += n
	}
	return out, rows.Err()
}

// record writes the placement to the group registry: member counts of live and moved groups (re-activating
// retired ones), retired groups, and the object rows of a moved group re-pointed at its successor. Candidate
// rows are written by the scan.
func (p placement) record(ctx context.Context, tx pgx.Tx, ruleset string) error {
	groups := append([]gcos.Group{}, p.moved...)
	for _, g := range p.live {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Key < groups[j].Key }) // one lock order
	if err := UpsertGroups(ctx, tx, groups); err != nil {
		return err
	}
	retired := make([]string, 0, len(p.retired))
	for k := range p.retired {
		retired = append(retired, k)
	}
	sort.Strings(retired)
	if err := retireGroups(ctx, tx, retired); err != nil {
		return err
	}
	if len(p.rekeyed) == 0 {
		return nil
	}
	from, to := make([]string, 0, len(p.rekeyed)), make([]string, 0, len(p.rekeyed))
	for f, t := range p.rekeyed {
		from, to = append(from, f), append(to, t)
	}
	if _, err := tx.Exec(ctx, `UPDATE governance_candidate_object o SET group_key = m.to_key, updated_at = now()
		FROM unnest($2::text[], $3::text[]) AS m(from_key, to_key)
		WHERE o.group_key = m.from_key AND o.ruleset_version = $1`, ruleset, from, to); err != nil {
		return fmt.Errorf("move object rows to their groups: %w", err)
	}
	return nil
}

// MemberCounts counts the members of every base group of the collections now, through a tail position (every
// birth when through is nil).
func (s *Store) MemberCounts(ctx context.Context, tx pgx.Tx, colls []string, through *tailPosition) (map[BirthBase]int64, error) {
	out := map[BirthBase]int64{}
	if len(colls) == 0 {
		return out, nil
	}
	if err := noJIT(ctx, tx); err != nil {
		return nil, err
	}
	var at *time.Time
	var id *int64
	if through != nil {
		at, id = &through.at, &through.id
	}
	rows, err := tx.Query(ctx, s.BirthBinding().memberCountSQL(), colls, at, id)
	if err != nil {
		return nil, fmt.Errorf("count group members: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b BirthBase
		var n int64
		if err := rows.Scan(&b.Class, &b.Coll, &b.Status, &n); err != nil {
			return nil, fmt.Errorf("count group members: %w", err)
		}
		out[b] += n
	}
	return out, rows.Err()
}

// noJIT turns JIT compilation off for the rest of the transaction: the counts are short scans and aggregates, on
// which JIT costs several times the query itself.
func noJIT(ctx context.Context, tx pgx.Tx) error {
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off`); err != nil {
		return fmt.Errorf("turn jit off: %w", err)
	}
	return nil
}

func baseOf(g gcos.Group) BirthBase {
	return BirthBase{Deref(g.ObjectClass), Deref(g.SourceRegistry), Deref(g.LifecycleStatus)}
}
