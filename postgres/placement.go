package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// placement is where a scan found the members of the groups it claimed, counted from the source now: a scan
// judges a group on its members as they are, not as the last snapshot counted them, and moves them to the group
// their dimensions name now (SPEC §4, §8; doc 40 §40.8).
type placement struct {
	live    map[string]gcos.Group // claimed groups that still hold members, with the count now
	retired map[string]string     // claimed groups whose source is gone → why: "empty" or "moved"
	rekeyed map[string]string     // a moved group → the group of the same base and scope its members are in now
	moved   []gcos.Group          // those groups, when the tick did not claim them itself
	// counted is, per claimed group, how many of its base's members are at or before the births tail position the
	// tick counted through (nil without one): what the group's next count adds the births handed off since to.
	counted map[string]*int64
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
// (no intake yet, or an ordering column without a time zone): a scan then recounts every group from the source.
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

// placeGroups counts the members of the claimed groups now and decides, for each claimed group, whether it is
// still the group its members belong to in its scope: the key the registries give its base (class, registry,
// lifecycle) and scope now must be its own, and the base must have members. Otherwise it is retired, and the
// current group of its base and scope, when that has members, is judged in its place.
//
// Counts are exact through the births tail's position (through): a group dirtied by births alone since its last
// count, counted within scan.count_window, adds the births handed off since (a read of the (born_at, id) index over
// that range); any other group recounts its collection from the source. The births the tail has not reached yet are added to both (they are
// members now), but not to what the next count starts from.
func (s *Store) placeGroups(ctx context.Context, tx pgx.Tx, ev *evaluator, groups map[string]gcos.Group,
	prior map[string]storedResult, through *tailPosition) (placement, error) {
	p := placement{live: map[string]gcos.Group{}, retired: map[string]string{}, rekeyed: map[string]string{}, counted: map[string]*int64{}}
	counts, err := s.countGroups(ctx, tx, groups, prior, through)
	if err != nil {
		return p, err
	}
	for key, c := range counts {
		if through != nil {
			p.counted[key] = &c.through
		}
	}
	current := map[birthBase]map[string]gcos.Dimensions{}
	for _, g := range groups {
		b := baseOf(g)
		if _, ok := current[b]; ok {
			continue
		}
		byScope := map[string]gcos.Dimensions{}
		for _, d := range ev.regs.Dimensions(gcos.BaseGroup{ObjectClass: b.class, SourceRegistry: b.coll, LifecycleStatus: b.status}) {
			byScope[deref(d.Scope)] = d
		}
		current[b] = byScope
	}
	queued := map[string]bool{}
	for key, g := range groups {
		n := counts[key].members
		d, ok := current[baseOf(g)][deref(g.Scope)]
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

// memberCount is a group's member count now, and how many of those members are at or before the births tail
// position it was counted through.
type memberCount struct{ members, through int64 }

// countGroups counts each group's members (see placeGroups).
func (s *Store) countGroups(ctx context.Context, tx pgx.Tx, groups map[string]gcos.Group, prior map[string]storedResult,
	through *tailPosition) (map[string]memberCount, error) {
	out := make(map[string]memberCount, len(groups))
	if err := noJIT(ctx, tx); err != nil {
		return nil, err
	}
	type since struct {
		key     string
		base    birthBase
		from    tailPosition
		members int64
	}
	var adds []since
	spans := map[tailPosition]int64{}
	full := map[string]birthBase{}
	var fullColls, colls []string
	seenFull, seen := map[string]bool{}, map[string]bool{}
	for key, g := range groups {
		b := baseOf(g)
		if !seen[b.coll] {
			seen[b.coll] = true
			colls = append(colls, b.coll)
		}
		was, ok := prior[key]
		if through != nil && ok && was.countable() && !through.after(*was.throughAt, *was.throughID) {
			from := tailPosition{*was.throughAt, *was.throughID}
			span, err := s.birthsSince(ctx, tx, spans, from, *through)
			if err != nil {
				return nil, err
			}
			if span <= s.cfg.Scan.CountWindow {
				adds = append(adds, since{key, b, from, *was.throughMembers})
				continue
			}
		}
		full[key] = b
		if !seenFull[b.coll] {
			seenFull[b.coll] = true
			fullColls = append(fullColls, b.coll)
		}
	}
	counts, err := s.memberCounts(ctx, tx, fullColls, through)
	if err != nil {
		return nil, err
	}
	for key, b := range full {
		out[key] = memberCount{through: counts[b]}
	}
	if through == nil {
		for key, c := range out {
			out[key] = memberCount{members: c.through} // every birth was counted
		}
		return out, nil
	}
	// The births handed off since the oldest count among the additions, and those not handed off yet.
	from := *through
	for _, a := range adds {
		if a.from.after(from.at, from.id) { // from lies after a.from: start earlier
			from = a.from
		}
	}
	born, err := s.bornAfter(ctx, tx, from, colls)
	if err != nil {
		return nil, err
	}
	for _, a := range adds {
		n := a.members
		for _, pos := range born[a.base] {
			if a.from.after(pos.at, pos.id) && !through.after(pos.at, pos.id) {
				n++
			}
		}
		out[a.key] = memberCount{through: n}
	}
	for key, g := range groups {
		c := out[key]
		c.members = c.through
		for _, pos := range born[baseOf(g)] {
			if through.after(pos.at, pos.id) {
				c.members++ // not handed off yet
			}
		}
		out[key] = c
	}
	return out, nil
}

// birthsSince estimates how many births lie between two tail positions by their ids (ids are drawn in birth
// order), to choose between adding births and recounting; it never decides a count. A position at a time
// boundary (the id the seed horizon carries) is measured from the last birth before it.
func (s *Store) birthsSince(ctx context.Context, tx pgx.Tx, cache map[tailPosition]int64, from, through tailPosition) (int64, error) {
	if n, ok := cache[from]; ok {
		return n, nil
	}
	id := from.id
	if id == math.MinInt64 {
		b := s.birthBinding()
		err := tx.QueryRow(ctx, fmt.Sprintf(`SELECT %[2]s FROM %[1]s WHERE (%[3]s, %[2]s) < ($1::timestamptz, $2::bigint)
			ORDER BY %[3]s DESC, %[2]s DESC LIMIT 1`, ident(b.Table), ident(b.ID), ident(b.BornAt)), from.at, from.id).Scan(&id)
		if errors.Is(err, pgx.ErrNoRows) {
			id = 0
		} else if err != nil {
			return 0, fmt.Errorf("measure births since a count: %w", err)
		}
	}
	n := max(through.id-id, 0)
	cache[from] = n
	return n, nil
}

// bornAfter lists the births of the collections after a tail position, by anchor base group.
func (s *Store) bornAfter(ctx context.Context, tx pgx.Tx, from tailPosition, colls []string) (map[birthBase][]tailPosition, error) {
	rows, err := tx.Query(ctx, s.birthBinding().bornBetweenSQL(), from.at, from.id, nil, nil, colls)
	if err != nil {
		return nil, fmt.Errorf("read births since the last count: %w", err)
	}
	defer rows.Close()
	born := map[birthBase][]tailPosition{}
	for rows.Next() {
		var b birthBase
		var pos tailPosition
		if err := rows.Scan(&b.class, &b.coll, &b.status, &pos.at, &pos.id); err != nil {
			return nil, fmt.Errorf("read births since the last count: %w", err)
		}
		born[b] = append(born[b], pos)
	}
	return born, rows.Err()
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
	if err := upsertGroups(ctx, tx, groups); err != nil {
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

// memberCounts counts the members of every base group of the collections now, through a tail position (every
// birth when through is nil).
func (s *Store) memberCounts(ctx context.Context, tx pgx.Tx, colls []string, through *tailPosition) (map[birthBase]int64, error) {
	out := map[birthBase]int64{}
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
	rows, err := tx.Query(ctx, s.birthBinding().memberCountSQL(), colls, at, id)
	if err != nil {
		return nil, fmt.Errorf("count group members: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var b birthBase
		var n int64
		if err := rows.Scan(&b.class, &b.coll, &b.status, &n); err != nil {
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

func baseOf(g gcos.Group) birthBase {
	return birthBase{deref(g.ObjectClass), deref(g.SourceRegistry), deref(g.LifecycleStatus)}
}
