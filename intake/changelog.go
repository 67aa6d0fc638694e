package intake

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// The change ledger's rows mapped to signals: what each row names, resolved against the registries; which groups
// it dirties is gcos.RouteChange's decision.

// mapChangelog maps one registry_changelog row of a known kind to a signal (the caller has already set aside
// GCOS's own echo, rows no rule maps and rows from untrusted sources).
// entity_type is either a registry word (the row is about a collection, pivot, rule, owner…) or an object class
// (the row is about one object of that class, named by entity_code); a row that is neither cannot be mapped and is
// returned as an error, which sends it to the retry lane. Which groups the row dirties is gcos.RouteChange's
// decision; this function only resolves what the row names.
func (s *Stage) mapChangelog(ctx context.Context, tx pgx.Tx, rset *registrySet, counts collectionCounts, recounted map[string]bool, r postgres.TailRow, kind gcos.ChangeKind) (*signal, error) {
	regs := rset.regs
	table := "registry_changelog"
	if r.Observed {
		table = r.Source // the registry watch's own (registry:<table>): its rows are no change-ledger ids
	}
	sig := &signal{kind: kind, subject: r.EntityCode, actor: cmp.Or(r.ChangedBy, "unknown"), source: cmp.Or(r.ChangedBy, table),
		firstID: r.ID, occurred: r.TS, table: table, objectTyp: r.EntityType, coll: r.EntityType, code: cmp.Or(r.EntityCode, fmt.Sprint(r.ID))}
	subject := gcos.ChangeSubject{Kind: kind, Code: r.EntityCode}
	classColl, isClass := regs.Classes[r.EntityType]
	if isClass && classColl != nil {
		sig.coll = *classColl
	}
	switch {
	case kind == gcos.ChangePolicy || kind == gcos.ChangeRuleset:
		// Rule changes reach groups through a ruleset bump: the diff of the activation dirties exactly the changed
		// rules' scope. The signal still travels (and is audited); nothing is dirtied twice.
		return sig, nil
	case kind == gcos.ChangeAuthority:
		subject.Registry = r.EntityType
		subject.Scope, subject.Class, subject.Collection = s.authoritySubject(ctx, tx, r)
	case !isClass:
		subject.Registry = r.EntityType
		if kind == gcos.ChangeAxisIntroduced {
			for _, p := range regs.Pivots {
				if p.PivotCode == r.EntityCode && p.EntityType != nil {
					subject.Class = *p.EntityType
				}
			}
		}
	default:
		subject.Class, subject.Collection = r.EntityType, sig.coll
		base, found, err := s.objectBase(ctx, tx, sig.coll, r.EntityCode)
		if err != nil {
			return nil, err
		}
		if found {
			subject.Object = &base
			sig.object = &postgres.BirthBase{Class: base.ObjectClass, Coll: base.SourceRegistry, Status: base.LifecycleStatus}
			if kind != gcos.ChangeObjectBorn && !recounted[base.SourceRegistry] {
				// The object may have moved between base groups: the kept counts of its collection are counted again
				// through the births cursor, once a page (its rows' changes committed before it was read). The same
				// read counts its members now, for movedBases.
				members, err := s.core.RecountKept(ctx, tx, base.SourceRegistry, string(kind))
				if err != nil {
					return nil, err
				}
				if members != nil {
					counts[base.SourceRegistry] = members
				}
				recounted[base.SourceRegistry] = true
			}
			if subject.Moved, err = s.movedBases(ctx, tx, counts, base, kind == gcos.ChangeObjectRetired); err != nil {
				return nil, err
			}
		}
	}
	route, err := gcos.RouteChange(subject)
	if err != nil {
		return nil, gcos.Errorf(gcos.EINVALID, "changelog %d (%s %s %s): %v", r.ID, r.Action, gcos.Quote(r.EntityType), r.EntityCode, err)
	}
	if route.Ensure != nil {
		// The group the object is in now may be new (a lifecycle it never had): record it, the scan counts it.
		b := route.Ensure
		if err := s.recordNewGroups(ctx, tx, rset.groupsOf(postgres.BirthBase{Class: b.ObjectClass, Coll: b.SourceRegistry, Status: b.LifecycleStatus})); err != nil {
			return nil, err
		}
	}
	if route.Fallback {
		s.routeFallbacks.Add(1)
		if s.routeFallbackLogged.CompareAndSwap(false, true) {
			s.logger.Warn("handoff: a change could not be placed precisely; it dirties every group it might affect (counted in gcos_route_fallbacks_total, logged once)",
				"changelog_id", r.ID, "entity_type", r.EntityType, "entity_code", r.EntityCode, "kind", kind)
		}
	}
	if sig.groups, err = selectGroups(ctx, tx, route.Selectors); err != nil {
		return nil, fmt.Errorf("select groups for %s: %w", kind, err)
	}
	return sig, nil
}

// objectBase is an object's anchor base group now: its own (class, collection, status), or its parent's for an
// inherited child (as the snapshot and the scans place it). found is false when the inventory does not hold it.
func (s *Stage) objectBase(ctx context.Context, tx pgx.Tx, coll, code string) (gcos.BaseGroup, bool, error) {
	b := s.core.BirthBinding()
	var base gcos.BaseGroup
	err := tx.QueryRow(ctx, b.SQL(`SELECT coalesce(p.{type}, o.{type}), o.{coll}, coalesce(p.{status}, o.{status})
		FROM {t} o LEFT JOIN {t} p ON o.{parent} IS NOT NULL AND p.{coll} = o.{coll} AND p.{code} = o.{parent}
		WHERE o.{coll} = $1 AND o.{code} = $2`), coll, code).Scan(
		&base.ObjectClass, &base.SourceRegistry, &base.LifecycleStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return base, false, nil
	}
	if err != nil {
		return base, false, fmt.Errorf("find object %s:%s: %w", coll, code, err)
	}
	return base, true, nil
}

// collectionCounts caches, within one page of the handoff, the member counts of the collections it counted.
type collectionCounts map[string]map[postgres.BirthBase]int64

// movedBases lists the base groups of base's class in its registry whose live groups were last judged on a member
// count other than the one they have now: the groups a lifecycle move (or anything else not yet scanned) changed.
// The collection is counted once per page however many of its objects the page's rows name.
//
// A lifecycle change (retire, supersede, merge: every live base) takes every live base of the class in the registry
// instead of those whose count differs: the comparison races a scan that is counting the base from kept counts
// that do not know the move yet (the scan's count has not committed, so the recorded count still matches the
// source, one birth in and the moved one out), and the base the object left would keep a count it no longer has.
func (s *Stage) movedBases(ctx context.Context, tx pgx.Tx, cache collectionCounts, base gcos.BaseGroup, every bool) ([]gcos.BaseGroup, error) {
	if every {
		rows, err := tx.Query(ctx, `SELECT DISTINCT lifecycle_status FROM governance_group
			WHERE source_registry = $1 AND object_class = $2 AND retired_at IS NULL AND lifecycle_status IS NOT NULL
			ORDER BY 1`, base.SourceRegistry, base.ObjectClass)
		if err != nil {
			return nil, fmt.Errorf("read the live bases: %w", err)
		}
		statuses, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("read the live bases: %w", err)
		}
		out := make([]gcos.BaseGroup, 0, len(statuses))
		for _, st := range statuses {
			out = append(out, gcos.BaseGroup{ObjectClass: base.ObjectClass, SourceRegistry: base.SourceRegistry, LifecycleStatus: st})
		}
		return out, nil
	}
	counts, ok := cache[base.SourceRegistry]
	if !ok {
		var err error
		if counts, err = s.core.MemberCounts(ctx, tx, []string{base.SourceRegistry}, nil); err != nil {
			return nil, err
		}
		cache[base.SourceRegistry] = counts
	}
	rows, err := tx.Query(ctx, `SELECT DISTINCT lifecycle_status, member_count FROM governance_group
		WHERE source_registry = $1 AND object_class = $2 AND retired_at IS NULL AND lifecycle_status IS NOT NULL
		ORDER BY 1, 2`, base.SourceRegistry, base.ObjectClass)
	if err != nil {
		return nil, fmt.Errorf("read recorded member counts: %w", err)
	}
	defer rows.Close()
	var out []gcos.BaseGroup
	for rows.Next() {
		var status string
		var recorded int64
		if err := rows.Scan(&status, &recorded); err != nil {
			return nil, fmt.Errorf("read recorded member counts: %w", err)
		}
		b := gcos.BaseGroup{ObjectClass: base.ObjectClass, SourceRegistry: base.SourceRegistry, LifecycleStatus: status}
		if counts[postgres.BirthBase{Class: b.ObjectClass, Coll: b.SourceRegistry, Status: b.LifecycleStatus}] != recorded && !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, rows.Err()
}

// selectGroups lists the registry's groups (retired ones too: a change may bring members back) that any
// selector matches, with gcos.GroupSelector.Matches's semantics.
func selectGroups(ctx context.Context, tx pgx.Tx, sels []gcos.GroupSelector) ([]string, error) {
	if len(sels) == 0 {
		return nil, nil
	}
	var ors []string
	var args []any
	arg := func(v string) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	for _, sel := range sels {
		if sel.All {
			ors = []string{"true"}
			args = nil
			break
		}
		var ands []string
		if sel.Scope != nil {
			ands = append(ands, fmt.Sprintf("(scope IS NULL OR scope = %s OR scope = %s)", arg(gcos.UnscopedScope), arg(*sel.Scope)))
		}
		for _, f := range []struct {
			col string
			v   *string
		}{{"object_class", sel.ObjectClass}, {"source_registry", sel.SourceRegistry}, {"axis_family", sel.AxisFamily}, {"lifecycle_status", sel.Lifecycle}} {
			if f.v != nil {
				ands = append(ands, f.col+" = "+arg(*f.v))
			}
		}
		if len(ands) == 0 {
			ands = []string{"true"}
		}
		ors = append(ors, "("+strings.Join(ands, " AND ")+")")
	}
	rows, err := tx.Query(ctx, `SELECT group_key FROM governance_group WHERE `+strings.Join(ors, " OR ")+` ORDER BY group_key`, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// authoritySubject resolves an ownership or exception row to (scope, class, collection); unknown ids select by
// what the row names (entity_code as class or collection).
func (s *Stage) authoritySubject(ctx context.Context, tx pgx.Tx, r postgres.TailRow) (scope, class, coll string) {
	var q string
	var table string
	switch r.EntityType {
	case "ownership":
		table = s.cfg.Binding.RegistryTable(gcos.TableOwnership)
		q = `SELECT coalesce(scope_code, ''), coalesce(entity_type, ''), coalesce(collection_name, '') FROM {t} WHERE id::text = $1`
	case "exception":
		table = gcos.TableExceptions
		q = `SELECT coalesce(scope_code, ''), coalesce(entity_type, ''), coalesce(collection_name, '') FROM {t} WHERE exception_id = $1`
	default:
		return "", r.EntityType, ""
	}
	if ok, _ := postgres.TableExists(ctx, tx, postgres.Quote(table)); !ok {
		return "", "", ""
	}
	q = postgres.Names{"t": {table}}.SQL(q)
	// A missing row (deleted, or a malformed id) degrades to "every group" — fail closed: dirty more, never less.
	_ = tx.QueryRow(ctx, q, r.EntityCode).Scan(&scope, &class, &coll)
	return scope, class, coll
}
