package postgres

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// The handoff apply step (SPEC §9.1): each tailed row maps to (change_kind, group_key, object_ref,
// canonical_address); changes are coalesced per group within the page, groups are dirtied by the one dirty-mark
// API, and one governance.handoff.<kind> signal per (group, kind, id bucket) is emitted — all inside the poll's
// transaction, so the cursor advances together with what the rows produced.

// registryCache keeps the registries the mapping needs for a short time, so a busy tail does not reload them on
// every page. A registry change reaches GCOS as a changelog signal that dirties the affected groups anyway.
type registryCache struct {
	mu     sync.Mutex
	regs   gcos.Registries
	loaded time.Time
}

const registryCacheTTL = time.Second

func (s *Store) cachedRegistries(ctx context.Context, q querier) (gcos.Registries, error) {
	s.regCache.mu.Lock()
	defer s.regCache.mu.Unlock()
	if time.Since(s.regCache.loaded) < registryCacheTTL {
		return s.regCache.regs, nil
	}
	regs, err := loadRegistries(ctx, q)
	if err != nil {
		return regs, err
	}
	s.regCache.regs, s.regCache.loaded = regs, time.Now()
	return regs, nil
}

// HandoffStats counts what one apply did.
type HandoffStats struct {
	Rows      int            `json:"rows"`
	Signals   int            `json:"signals"`   // coalesced (group, kind) changes
	Dirtied   int64          `json:"dirtied"`   // groups newly marked dirty
	Emitted   int            `json:"emitted"`   // outbox rows
	Captured  int            `json:"captured"`  // event_pending captures (type not active)
	Skipped   int            `json:"skipped"`   // rows no mapping rule selects (and GCOS's own echo)
	Untrusted int            `json:"untrusted"` // rows from an untrusted source system
	Kinds     map[string]int `json:"kinds"`
}

// signal is one coalesced change: a kind on a set of groups.
type signal struct {
	kind      gcos.ChangeKind
	groups    []string
	subject   string // what the change is about (collection, class, object)
	coll      string
	code      string
	actor     string
	source    string
	firstID   int64
	occurred  time.Time
	table     string
	objectTyp string
}

// ApplyHandoff is the intake's apply step for a page of tailed rows. Rows that cannot be mapped are returned as
// failures (they go to the retry lane and, after max attempts, the DLQ) and never block the page.
func (s *Store) ApplyHandoff(ctx context.Context, tx pgx.Tx, rows []TailRow) ([]RowFailure, HandoffStats, error) {
	st := HandoffStats{Rows: len(rows), Kinds: map[string]int{}}
	if len(rows) == 0 {
		return nil, st, nil
	}
	regs, err := s.cachedRegistries(ctx, tx)
	if err != nil {
		return nil, st, err
	}
	var failures []RowFailure
	var births []TailRow
	var sigs []*signal
	for _, r := range rows {
		switch {
		case r.Source == s.birthSourceName():
			if r.EntityType == "" || r.CollectionName == "" || r.EntityCode == "" || r.Status == "" {
				failures = append(failures, RowFailure{ID: r.ID, Kind: gcos.ChangeObjectBorn, Err: gcos.Errorf(gcos.EINVALID, "birth %d: class, collection, code and status are required", r.ID)})
				continue
			}
			births = append(births, r)
		default:
			sig, err := s.mapChangelog(ctx, tx, regs, r)
			if err != nil {
				failures = append(failures, RowFailure{ID: r.ID, Err: err})
				continue
			}
			if sig == nil {
				st.Skipped++
				continue
			}
			sigs = append(sigs, sig)
		}
	}
	if len(births) > 0 {
		bs, untrusted, err := s.mapBirths(ctx, tx, regs, births)
		if err != nil {
			return nil, st, err
		}
		sigs = append(sigs, bs...)
		st.Untrusted += untrusted
	}
	// Coalesce: one dirty mark per (group, reason) for the page, however many rows touched it.
	byReason := map[string]map[string]bool{}
	for _, sig := range sigs {
		st.Kinds[string(sig.kind)]++
		reason := gcos.DirtyReasonFor(sig.kind)
		if byReason[reason] == nil {
			byReason[reason] = map[string]bool{}
		}
		for _, g := range sig.groups {
			byReason[reason][g] = true
		}
	}
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, reason := range reasons {
		keys := make([]string, 0, len(byReason[reason]))
		for k := range byReason[reason] {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		n, err := markDirty(ctx, tx, keys, reason)
		if err != nil {
			return nil, st, err
		}
		st.Dirtied += n
	}
	st.Signals = len(sigs)
	if err := s.emitHandoffs(ctx, tx, sigs, &st); err != nil {
		return nil, st, err
	}
	return failures, st, nil
}

func (s *Store) birthSourceName() string { return s.cfg.SourceBinding.Birth.Table }

// mapBirths resolves each birth's group (its anchor's, for an inherited child) in every scope, records new groups,
// and returns one signal per base group. Untrusted source systems materialize an object row with needs_input.
func (s *Store) mapBirths(ctx context.Context, tx pgx.Tx, regs gcos.Registries, births []TailRow) ([]*signal, int, error) {
	anchors, err := s.anchors(ctx, tx, births)
	if err != nil {
		return nil, 0, err
	}
	type base struct{ class, coll, status string }
	bases := map[base]*signal{}
	var order []base
	counts := map[base]int64{}
	untrusted := 0
	var untrustedRows []TailRow
	for _, r := range births {
		b := base{r.EntityType, r.CollectionName, r.Status}
		if r.ParentCode != "" {
			if a, ok := anchors[[2]string{r.CollectionName, r.ParentCode}]; ok {
				b = a
			}
		}
		if !s.cfg.Intake.Trusted(r.SourceSystem) {
			untrusted++
			untrustedRows = append(untrustedRows, r)
		}
		counts[b]++
		if sig, ok := bases[b]; ok {
			if r.ID < sig.firstID {
				sig.firstID = r.ID
			}
			continue
		}
		bases[b] = &signal{kind: gcos.ChangeObjectBorn, subject: b.coll, coll: r.CollectionName, code: r.EntityCode,
			actor: nonEmpty(r.ActorRef, "unknown"), source: nonEmpty(r.SourceSystem, s.birthSourceName()), firstID: r.ID,
			occurred: r.TS, table: s.birthSourceName(), objectTyp: b.class}
		order = append(order, b)
	}
	var groups []gcos.Group
	for _, b := range order {
		for _, d := range regs.Dimensions(gcos.BaseGroup{ObjectClass: b.class, SourceRegistry: b.coll, LifecycleStatus: b.status}) {
			g := gcos.NewGroup(d, counts[b])
			groups = append(groups, g)
			bases[b].groups = append(bases[b].groups, g.Key)
		}
	}
	if err := recordNewGroups(ctx, tx, groups); err != nil {
		return nil, 0, err
	}
	if err := s.quarantineUntrusted(ctx, tx, regs, untrustedRows, anchors); err != nil {
		return nil, 0, err
	}
	out := make([]*signal, 0, len(order))
	for _, b := range order {
		out = append(out, bases[b])
	}
	return out, untrusted, nil
}

// anchors looks up the parents of inherited children: (collection, parent_code) → the anchor's base group.
func (s *Store) anchors(ctx context.Context, tx pgx.Tx, births []TailRow) (map[[2]string]struct{ class, coll, status string }, error) {
	var colls, codes []string
	seen := map[[2]string]bool{}
	for _, r := range births {
		k := [2]string{r.CollectionName, r.ParentCode}
		if r.ParentCode != "" && !seen[k] {
			seen[k] = true
			colls, codes = append(colls, r.CollectionName), append(codes, r.ParentCode)
		}
	}
	out := map[[2]string]struct{ class, coll, status string }{}
	if len(colls) == 0 {
		return out, nil
	}
	b := s.birthBinding()
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT p.%[2]s, p.%[3]s, p.%[4]s, p.%[5]s FROM %[1]s p
		JOIN unnest($1::text[], $2::text[]) AS k(coll, code) ON p.%[2]s = k.coll AND p.%[3]s = k.code`,
		ident(b.Table), ident(b.Collection), ident(b.Code), ident(b.Type), ident(b.Status)), colls, codes)
	if err != nil {
		return nil, fmt.Errorf("resolve anchors: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var coll, code, class, status string
		if err := rows.Scan(&coll, &code, &class, &status); err != nil {
			return nil, err
		}
		out[[2]string{coll, code}] = struct{ class, coll, status string }{class, coll, status}
	}
	return out, rows.Err()
}

// recordNewGroups adds groups the registry has not seen; their member count is corrected by the next full
// snapshot (member counts are the snapshot's truth, never incremented per signal, so a replay cannot inflate them).
func recordNewGroups(ctx context.Context, tx pgx.Tx, groups []gcos.Group) error {
	if len(groups) == 0 {
		return nil
	}
	n := len(groups)
	keys, classes, regs, axes, scopes, lifecycles, owners := make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n), make([]*string, n)
	counts := make([]int64, n)
	for i, g := range groups {
		keys[i], classes[i], regs[i], axes[i], scopes[i], lifecycles[i], owners[i] = g.Key, g.ObjectClass, g.SourceRegistry, g.AxisFamily, g.Scope, g.LifecycleStatus, g.OwnerScope
		counts[i] = g.MemberCount
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO governance_group (group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, member_count, depends_on)
		SELECT u.k, u.c, u.r, u.a, u.s, u.l, u.o, u.n,
		       jsonb_build_object('collections', jsonb_build_array(u.r), 'rule_scopes', jsonb_build_array(u.s), 'axis_families', CASE WHEN u.a IS NULL THEN '[]'::jsonb ELSE jsonb_build_array(u.a) END)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::bigint[]) AS u(k, c, r, a, s, l, o, n)
		ON CONFLICT (group_key) DO UPDATE SET last_seen_at = now()`, keys, classes, regs, axes, scopes, lifecycles, owners, counts)
	if err != nil {
		return fmt.Errorf("record groups: %w", err)
	}
	return nil
}

// quarantineUntrusted materializes an object row (needs_input, untrusted_source) and an input finding for every
// birth from an untrusted source system: it cannot produce a relevant verdict until trusted.
func (s *Store) quarantineUntrusted(ctx context.Context, tx pgx.Tx, regs gcos.Registries, rows []TailRow, anchors map[[2]string]struct{ class, coll, status string }) error {
	if len(rows) == 0 {
		return nil
	}
	rs, err := s.currentRuleset(ctx)
	if err != nil {
		return err
	}
	snapshotID, err := latestFullSnapshotID(ctx, tx)
	if err != nil {
		return err
	}
	var objs []objectCandidate
	for _, r := range rows {
		class, coll, status := r.EntityType, r.CollectionName, r.Status
		if a, ok := anchors[[2]string{r.CollectionName, r.ParentCode}]; ok && r.ParentCode != "" {
			class, coll, status = a.class, a.coll, a.status
		}
		dims := regs.Dimensions(gcos.BaseGroup{ObjectClass: class, SourceRegistry: coll, LifecycleStatus: status})
		g := gcos.NewGroup(dims[0], 1)
		ref := r.ObjectRef()
		key := r.CanonicalRef()
		issueID, err := raiseFinding(ctx, tx, gcos.Finding{Type: gcos.InputIssue(gcos.InputUntrustedSource), Subject: ref, RulesetVersion: rs.Version,
			Evidence: map[string]any{"object_ref": ref, "source_system": r.SourceSystem, "source": r.Source, "id": r.ID}})
		if err != nil {
			return err
		}
		_ = issueID
		objs = append(objs, objectCandidate{key: key, objectType: class, objectRef: ref, reason: "open_finding", groupKey: g.Key,
			values: candidateValues{GroupKey: "object:" + key, Verdict: gcos.VerdictNeedsInput, Rule: "untrusted_source",
				InputQuality: string(gcos.InputUntrustedSource), RiskClass: regs.RiskClass(class), CoverageRequired: regs.CoverageRequired(class),
				DependsOn: []byte(`{}`), TTL: s.cfg.TTL.TTLFor(regs.RiskClass(class)), Evidence: "untrusted:" + r.SourceSystem, MemberCount: 1}})
	}
	_, err = upsertObjectRows(ctx, tx, snapshotID, rs.Version, "intake", objs)
	return err
}

// mapChangelog maps one registry_changelog row to a signal (nil: no rule selects it, or it is GCOS's own echo).
func (s *Store) mapChangelog(ctx context.Context, tx pgx.Tx, regs gcos.Registries, r TailRow) (*signal, error) {
	kind, ok := s.cfg.Intake.KindFor(r.EntityType, r.Action)
	if !ok {
		return nil, nil
	}
	if strings.HasPrefix(r.ChangedBy, "gcos:") && kind != gcos.ChangeRuleset {
		return nil, nil // our own audit rows are never fed back
	}
	sig := &signal{kind: kind, subject: r.EntityCode, actor: nonEmpty(r.ChangedBy, "unknown"), source: nonEmpty(r.ChangedBy, "registry_changelog"),
		firstID: r.ID, occurred: r.TS, table: "registry_changelog", objectTyp: r.EntityType, coll: r.EntityType, code: nonEmpty(r.EntityCode, fmt.Sprint(r.ID))}
	var cond string
	var args []any
	switch kind {
	case gcos.ChangeCollection, gcos.ChangeCount, gcos.ChangeSource:
		cond, args = `source_registry = $1`, []any{r.EntityCode}
	case gcos.ChangeAxisIntroduced:
		// A pivot names its class and family: dirty that class's groups and the family's.
		class := ""
		for _, p := range regs.Pivots {
			if p.PivotCode == r.EntityCode && p.EntityType != nil {
				class = *p.EntityType
			}
		}
		cond, args = `object_class = $1 OR axis_family = $2 OR object_class = $2`, []any{class, r.EntityCode}
	case gcos.ChangeAuthority:
		scope, class, coll := s.authoritySubject(ctx, tx, r)
		cond, args = `($1 = '' OR scope = $1) AND (($2 <> '' AND object_class = $2) OR ($3 <> '' AND source_registry = $3) OR ($2 = '' AND $3 = ''))`, []any{scope, class, coll}
	case gcos.ChangePolicy, gcos.ChangeRuleset:
		// Rule changes reach groups through a ruleset bump: the diff of the activation dirties exactly the changed
		// rules' scope. The signal still travels (and is audited); nothing is dirtied twice.
		return sig, nil
	default: // object-level kinds: entity_type is the object's class
		if _, ok := regs.Classes[r.EntityType]; !ok {
			return nil, gcos.Errorf(gcos.EINVALID, "changelog %d: %s %q is neither a registry word nor a known class", r.ID, r.Action, r.EntityType)
		}
		cond, args = `object_class = $1`, []any{r.EntityType}
		if c := regs.Classes[r.EntityType]; c != nil {
			sig.coll = *c
		}
	}
	rows, err := tx.Query(ctx, `SELECT group_key FROM governance_group WHERE `+cond, args...)
	if err != nil {
		return nil, fmt.Errorf("select groups for %s: %w", kind, err)
	}
	if sig.groups, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return nil, fmt.Errorf("select groups for %s: %w", kind, err)
	}
	return sig, nil
}

// authoritySubject resolves an ownership or exception row to (scope, class, collection); unknown ids select by
// what the row names (entity_code as class or collection).
func (s *Store) authoritySubject(ctx context.Context, tx pgx.Tx, r TailRow) (scope, class, coll string) {
	var q string
	switch r.EntityType {
	case "ownership":
		q = `SELECT coalesce(scope_code, ''), coalesce(entity_type, ''), coalesce(collection_name, '') FROM governance_object_ownership WHERE id::text = $1`
	case "exception":
		q = `SELECT coalesce(scope_code, ''), coalesce(entity_type, ''), coalesce(collection_name, '') FROM governance_exception WHERE exception_id = $1`
	default:
		return "", r.EntityType, ""
	}
	if ok, _ := tableExists(ctx, tx, map[string]string{"ownership": gcos.TableOwnership, "exception": gcos.TableExceptions}[r.EntityType]); !ok {
		return "", "", ""
	}
	// A missing row (deleted, or a malformed id) degrades to "every group" — fail closed: dirty more, never less.
	_ = tx.QueryRow(ctx, q, r.EntityCode).Scan(&scope, &class, &coll)
	return scope, class, coll
}

// emitHandoffs emits one governance.handoff.<kind> signal per coalesced change and id bucket: a base group's births
// (whose groups in every scope it names by the first), or a changelog subject. The correlation id is built from the
// bucket, so a replay of the same rows produces the same ids; keys already seen are skipped before emitting.
func (s *Store) emitHandoffs(ctx context.Context, tx pgx.Tx, sigs []*signal, st *HandoffStats) error {
	bucket := s.cfg.Intake.SignalBucket
	type pending struct {
		sig  *signal
		corr string
	}
	var todo []pending
	var srcs, types, corrs []string
	for _, sig := range sigs {
		subject := sig.subject
		if len(sig.groups) > 0 && sig.kind == gcos.ChangeObjectBorn {
			subject = sig.groups[0]
		}
		corr := fmt.Sprintf("%s:%s:%s:%d", sig.table, sig.kind, subject, sig.firstID/bucket)
		todo = append(todo, pending{sig, corr})
		srcs, types, corrs = append(srcs, sig.source), append(types, sig.kind.EventType()), append(corrs, corr)
	}
	seen := map[string]bool{}
	rows, err := tx.Query(ctx, `SELECT k.source_system || chr(31) || k.event_type || chr(31) || k.correlation_id
		FROM governance_signal_key k JOIN unnest($1::text[], $2::text[], $3::text[]) AS u(s, t, c)
		ON k.source_system = u.s AND k.event_type = u.t AND k.correlation_id = u.c`, srcs, types, corrs)
	if err != nil {
		return fmt.Errorf("check signal keys: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("check signal keys: %w", err)
	}
	for _, k := range keys {
		seen[k] = true
	}
	for _, p := range todo {
		sig := p.sig
		if seen[sig.source+"\x1f"+sig.kind.EventType()+"\x1f"+p.corr] {
			continue // coalesced into a signal already emitted for this bucket
		}
		payload := map[string]any{"change_kind": string(sig.kind), "source": sig.table, "occurred_at": sig.occurred.UTC().Format(time.RFC3339Nano),
			"object_type": sig.objectTyp, "collection_name": nonEmpty(sig.coll, sig.subject), "count": len(sig.groups)}
		if len(sig.groups) > 0 {
			payload["group_key"] = sig.groups[0]
		}
		res, err := emitSignal(ctx, tx, Emit{EventType: sig.kind.EventType(), SubjectTable: sig.table, SubjectRef: sig.subject,
			CollectionName: nonEmpty(sig.coll, sig.table), EntityCode: nonEmpty(sig.code, sig.subject), ActorRef: sig.actor,
			SourceSystem: sig.source, CorrelationID: p.corr, OccurredAt: sig.occurred, Payload: payload})
		if err != nil {
			return fmt.Errorf("emit %s: %w", sig.kind, err)
		}
		seen[sig.source+"\x1f"+sig.kind.EventType()+"\x1f"+p.corr] = true
		switch res.Outcome {
		case EmitOutcomeEmitted:
			st.Emitted++
		case EmitOutcomeCaptured:
			st.Captured++
		}
	}
	return nil
}

func nonEmpty(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
