package scan

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
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

// placeGroups counts the members of the claimed groups now (countGroups) and decides, for each claimed group,
// whether it is still the group its members belong to in its scope: the key the registries give its base (class,
// registry, lifecycle) and scope now must be its own, and the base must have members. Otherwise it is retired, and
// the current group of its base and scope, when that has members, is judged in its place.
func (s *Stage) placeGroups(ctx context.Context, tx pgx.Tx, ev *postgres.Evaluator, groups map[string]gcos.Group) (placement, error) {
	p := placement{live: map[string]gcos.Group{}, retired: map[string]string{}, rekeyed: map[string]string{}}
	counts, err := s.core.CountGroups(ctx, tx, groups)
	if err != nil {
		return p, err
	}
	current := map[postgres.BirthBase]map[string]gcos.Dimensions{}
	for _, g := range groups {
		b := postgres.BaseOf(g)
		if _, ok := current[b]; ok {
			continue
		}
		byScope := map[string]gcos.Dimensions{}
		for _, d := range ev.Registries().Dimensions(gcos.BaseGroup{ObjectClass: b.Class, SourceRegistry: b.Coll, LifecycleStatus: b.Status}) {
			byScope[postgres.Deref(d.Scope)] = d
		}
		current[b] = byScope
	}
	queued := map[string]bool{}
	for key, g := range groups {
		n := counts[postgres.BaseOf(g)]
		d, ok := current[postgres.BaseOf(g)][postgres.Deref(g.Scope)]
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

// record writes the placement to the group registry: member counts of live and moved groups (re-activating
// retired ones), retired groups, and the object rows of a moved group re-pointed at its successor. Candidate
// rows are written by the scan.
func (p placement) record(ctx context.Context, tx pgx.Tx, ruleset string) error {
	groups := append([]gcos.Group{}, p.moved...)
	for _, g := range p.live {
		groups = append(groups, g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Key < groups[j].Key }) // one lock order
	if err := postgres.UpsertGroups(ctx, tx, groups); err != nil {
		return err
	}
	retired := make([]string, 0, len(p.retired))
	for k := range p.retired {
		retired = append(retired, k)
	}
	sort.Strings(retired)
	if err := postgres.RetireGroups(ctx, tx, retired); err != nil {
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
