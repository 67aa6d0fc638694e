package scan

import (
	"context"
	"fmt"
	"sort"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/evaluate"
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
	// counted is when the counts were read and which births not handed off yet they include: the rows written
	// record both, so a pending mark they include is settled (postgres.ApplyPendingMarks).
	counted postgres.GroupCounts
}

// countedIn records on v what the count of g's base read (counted).
func (p placement) countedIn(g gcos.Group, v postgres.CandidateValues) postgres.CandidateValues {
	v.CountedAt, v.CountedSnapshot = &p.counted.At, p.counted.Snapshot
	v.CountedBirths = p.counted.Births[postgres.BaseOf(g)]
	return v
}

// placeGroups decides, on the members of the claimed groups' bases counted now (postgres.Store.CountGroups), for
// each claimed group, whether it is still the group its members belong to in its scope: the key the registries give
// its base (class, registry, lifecycle) and scope now must be its own, and the base must have members. Otherwise it
// is retired, and the current group of its base and scope, when that has members, is judged in its place.
func (s *Stage) placeGroups(ev *evaluate.Evaluator, groups map[string]gcos.Group, counted postgres.GroupCounts) placement {
	p := placement{live: map[string]gcos.Group{}, retired: map[string]string{}, rekeyed: map[string]string{}}
	p.counted = counted
	counts := counted.Members
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
	return p
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
	// Every row was locked by lockWrites: a tick never inserts a group key.
	if err := postgres.UpdateGroupCounts(ctx, tx, groups); err != nil {
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

// lockWrites takes, without waiting, the rows the tick writes beyond its claim (postgres.LockOrder): the group rows
// of the groups it judges and of the groups their members moved to, and the candidate rows of the latter. A group
// whose rows another transaction holds is deferred: the tick leaves it as it is, dirty (or unseeded), and a later
// tick takes it. A group whose members moved to a group the registry does not hold yet is deferred too; that group
// is returned in absent, for the tick to record after it commits (postgres.RecordPlaceholderGroups). The placement
// is trimmed to what the tick keeps.
//
// Every group sharing a collection and scope with a deferred one is deferred too, so that a birth is never written
// into one group of a scope while another of the tick's groups of that scope keeps it (collection.go); so is every
// group sharing one with a group in held (a live sibling whose row another transaction holds: liveSiblings).
func (p *placement) lockWrites(ctx context.Context, tx pgx.Tx, ruleset string, groups, held map[string]gcos.Group) (deferred map[string]bool, absent []gcos.Group, err error) {
	want := make([]string, 0, len(groups)+len(p.moved))
	for k := range groups {
		want = append(want, k)
	}
	for _, g := range p.moved {
		want = append(want, g.Key)
	}
	sort.Strings(want)
	haveGroup, err := keySet(ctx, tx, "lock group rows", `SELECT group_key FROM governance_group WHERE group_key = ANY($1)
		ORDER BY group_key FOR NO KEY UPDATE SKIP LOCKED`, want)
	if err != nil {
		return nil, nil, err
	}
	// The groups moved to: their candidate rows, when they have one, are taken the same way.
	targets := make([]string, 0, len(p.moved))
	for _, g := range p.moved {
		if haveGroup[g.Key] {
			targets = append(targets, g.Key)
		}
	}
	heldRow := map[string]bool{} // a candidate row exists and another transaction holds it
	if len(targets) > 0 {
		if heldRow, err = keySet(ctx, tx, "lock the candidate rows of moved-to groups", `
			WITH mine AS (
			    SELECT group_key FROM governance_candidate_state WHERE ruleset_version = $1 AND group_key = ANY($2)
			    ORDER BY group_key FOR UPDATE SKIP LOCKED
			)
			SELECT c.group_key FROM governance_candidate_state c
			WHERE c.ruleset_version = $1 AND c.group_key = ANY($2) AND c.group_key NOT IN (SELECT group_key FROM mine)`, ruleset, targets); err != nil {
			return nil, nil, err
		}
	}
	var missing []string
	for _, g := range p.moved {
		if !haveGroup[g.Key] {
			missing = append(missing, g.Key)
		}
	}
	exists := map[string]bool{} // of the moved-to groups not locked: those the registry holds (another transaction does)
	if len(missing) > 0 {
		if exists, err = keySet(ctx, tx, "read group rows", `SELECT group_key FROM governance_group WHERE group_key = ANY($1)`, missing); err != nil {
			return nil, nil, err
		}
	}
	usable := func(target string) bool { return haveGroup[target] && !heldRow[target] }
	deferred = map[string]bool{}
	for k := range groups {
		if !haveGroup[k] {
			deferred[k] = true
		} else if to, moved := p.rekeyed[k]; moved && !usable(to) {
			if _, claimed := groups[to]; !claimed {
				deferred[k] = true
			}
		}
	}
	for k := range groups { // a group whose members moved to a claimed group the tick defers waits with it
		if to, moved := p.rekeyed[k]; moved && deferred[to] {
			deferred[k] = true
		}
	}
	// A deferred group defers every group of its collection and scope (collection.go).
	waiting := map[collScope]bool{}
	for k := range deferred {
		waiting[collScopeOf(groups[k])] = true
	}
	for _, g := range held {
		waiting[collScopeOf(g)] = true
	}
	for k, g := range groups {
		if waiting[collScopeOf(g)] {
			deferred[k] = true
		}
	}
	// A claimed group is judged in place of its moved-to group only when that one is usable; and a moved-to
	// group is judged only for a group the tick keeps.
	kept := p.moved[:0]
	for _, g := range p.moved {
		referred := false
		for from, to := range p.rekeyed {
			if to == g.Key && !deferred[from] {
				referred = true
			}
		}
		switch {
		case referred && usable(g.Key):
			kept = append(kept, g)
		case !haveGroup[g.Key] && !exists[g.Key]:
			absent = append(absent, g)
		}
	}
	p.moved = kept
	for k := range deferred {
		delete(p.live, k)
		delete(p.retired, k)
		delete(p.rekeyed, k)
	}
	return deferred, absent, nil
}

// keySet runs a query of group keys and returns them as a set; what names it in an error.
func keySet(ctx context.Context, tx pgx.Tx, what, sql string, args ...any) (map[string]bool, error) {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	set := make(map[string]bool, len(keys))
	for _, k := range keys {
		set[k] = true
	}
	return set, nil
}
