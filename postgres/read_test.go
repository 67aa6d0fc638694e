package postgres_test

import (
	"slices"
	"testing"

	"gcos"
	"gcos/postgres"
)

// seeded is a backfilled world under an active ruleset.
func seeded(t *testing.T) *bundle {
	t.Helper()
	b := setup(t, 20000)
	res := b.backfill(t)
	b.activate(t, res.RulesetVersion)
	return b
}

func TestReadListGroupsPagination(t *testing.T) {
	t.Parallel()
	b := seeded(t)
	want := b.count(t, `SELECT count(*) FROM governance_group`)
	if want < 20 {
		t.Fatalf("only %d groups: the world is too small for this test", want)
	}

	seen := map[string]bool{}
	var keys []string
	after := ""
	pages := 0
	for {
		page, err := b.store.ListGroups(b.ctx, postgres.GroupFilter{After: after, Limit: 7})
		if err != nil {
			t.Fatalf("page %d: %v", pages, err)
		}
		pages++
		if len(page.Groups) > 7 {
			t.Fatalf("page %d has %d groups, limit 7", pages, len(page.Groups))
		}
		for _, g := range page.Groups {
			if seen[g.GroupKey] {
				t.Fatalf("group %s listed twice", g.GroupKey)
			}
			seen[g.GroupKey] = true
			keys = append(keys, g.GroupKey)
		}
		if page.Next == "" {
			break
		}
		if page.Next != page.Groups[len(page.Groups)-1].GroupKey {
			t.Fatalf("next %s is not the page's last key", page.Next)
		}
		after = page.Next
	}
	if int64(len(keys)) != want {
		t.Fatalf("paged through %d groups, registry has %d", len(keys), want)
	}
	if !slices.IsSorted(keys) {
		t.Fatal("groups are not ordered by group_key")
	}
	if exp := (want + 6) / 7; int64(pages) != exp {
		t.Errorf("%d pages, want %d", pages, exp)
	}

	page, err := b.store.ListGroups(b.ctx, postgres.GroupFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if exp := min(want, postgres.DefaultGroupLimit); int64(len(page.Groups)) != exp {
		t.Errorf("default limit: %d groups, want %d", len(page.Groups), exp)
	}
	page, err = b.store.ListGroups(b.ctx, postgres.GroupFilter{Limit: postgres.MaxGroupLimit})
	if err != nil {
		t.Fatal(err)
	}
	if exp := min(want, postgres.MaxGroupLimit); int64(len(page.Groups)) != exp {
		t.Errorf("largest page: %d groups, want %d", len(page.Groups), exp)
	}
	// Beyond the largest page is refused, never capped in silence.
	if _, err := b.store.ListGroups(b.ctx, postgres.GroupFilter{Limit: 100000}); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Errorf("limit 100000: err = %v, want EINVALID", err)
	}
}

func TestReadListGroupsFilters(t *testing.T) {
	t.Parallel()
	b := seeded(t)
	all := listAll(t, b, postgres.GroupFilter{})

	t.Run("verdict", func(t *testing.T) {
		var total int
		for _, v := range append(append([]gcos.Verdict{}, gcos.StoredVerdicts...), gcos.VerdictStale) {
			got := listAll(t, b, postgres.GroupFilter{Verdict: string(v)})
			for _, g := range got {
				if g.EffectiveVerdict != string(v) {
					t.Fatalf("verdict %s filter returned %s", v, g.EffectiveVerdict)
				}
			}
			direct := b.count(t, `SELECT count(*) FROM v_candidate_effective WHERE effective_verdict = $1`, string(v))
			if int64(len(got)) != direct {
				t.Errorf("verdict %s: %d groups, direct count %d", v, len(got), direct)
			}
			total += len(got)
		}
		if total != len(all) {
			t.Errorf("verdict filters cover %d groups, all = %d", total, len(all))
		}
	})

	t.Run("dimensions", func(t *testing.T) {
		g := all[len(all)/2]
		if g.Scope == nil || g.ObjectClass == nil || g.SourceRegistry == nil {
			t.Skip("picked group has a null dimension")
		}
		got := listAll(t, b, postgres.GroupFilter{Scope: *g.Scope})
		if direct := b.count(t, `SELECT count(*) FROM governance_group WHERE scope = $1`, *g.Scope); int64(len(got)) != direct {
			t.Errorf("scope %s: %d groups, direct %d", *g.Scope, len(got), direct)
		}
		got = listAll(t, b, postgres.GroupFilter{Scope: *g.Scope, ObjectClass: *g.ObjectClass, SourceRegistry: *g.SourceRegistry})
		direct := b.count(t, `SELECT count(*) FROM governance_group WHERE scope = $1 AND object_class = $2 AND source_registry = $3`,
			*g.Scope, *g.ObjectClass, *g.SourceRegistry)
		if int64(len(got)) != direct || direct == 0 {
			t.Errorf("combined filter: %d groups, direct %d", len(got), direct)
		}
		if !slices.ContainsFunc(got, func(x postgres.GroupView) bool { return x.GroupKey == g.GroupKey }) {
			t.Errorf("combined filter lost group %s", g.GroupKey)
		}
		// A value that names nothing is refused, not answered with an empty page that reads as "none of those".
		for _, f := range []postgres.GroupFilter{{ObjectClass: "no-such-class"}, {SourceRegistry: "no_such_registry"}, {Scope: "no-such-scope"}} {
			if _, err := b.store.ListGroups(b.ctx, f); gcos.ErrorCode(err) != gcos.EINVALID {
				t.Errorf("filter %+v: err = %v, want EINVALID", f, err)
			}
		}
	})

	t.Run("dirty", func(t *testing.T) {
		// Its own world: dirtying changes the effective verdicts the other subtests count.
		t.Parallel()
		b := seeded(t)
		all := listAll(t, b, postgres.GroupFilter{})
		var marked []string
		for i := 0; i < len(all); i += 5 {
			marked = append(marked, all[i].GroupKey)
		}
		if _, err := b.store.MarkDirty(b.ctx, marked, gcos.DirtyTTL); err != nil {
			t.Fatal(err)
		}
		yes, no := true, false
		var dirtyKeys []string
		for _, g := range listAll(t, b, postgres.GroupFilter{Dirty: &yes}) {
			if !g.Dirty || g.EffectiveVerdict != string(gcos.VerdictStale) && g.EffectiveVerdict != string(gcos.VerdictUnknown) {
				t.Errorf("dirty group %s: dirty=%v effective=%s", g.GroupKey, g.Dirty, g.EffectiveVerdict)
			}
			dirtyKeys = append(dirtyKeys, g.GroupKey)
		}
		if !slices.Equal(dirtyKeys, marked) {
			t.Errorf("dirty filter: %d groups, marked %d", len(dirtyKeys), len(marked))
		}
		if clean := listAll(t, b, postgres.GroupFilter{Dirty: &no}); len(clean)+len(dirtyKeys) != len(all) {
			t.Errorf("dirty=false: %d groups, want %d", len(clean), len(all)-len(dirtyKeys))
		}
	})

	t.Run("invalid", func(t *testing.T) {
		for name, f := range map[string]postgres.GroupFilter{
			"verdict":   {Verdict: "great"},
			"after":     {After: "not-a-key"},
			"limit":     {Limit: -1},
			"too many":  {Limit: postgres.MaxGroupLimit + 1},
			"control":   {Scope: "a\x00b"},
			"long":      {ObjectClass: string(make([]byte, 300))},
			"uppercase": {After: "ABCDEF0123456789ABCDEF0123456789"},
		} {
			if _, err := b.store.ListGroups(b.ctx, f); gcos.ErrorCode(err) != gcos.EINVALID {
				t.Errorf("%s: err = %v, want EINVALID", name, err)
			}
		}
	})
}

func listAll(t *testing.T, b *bundle, f postgres.GroupFilter) []postgres.GroupView {
	t.Helper()
	var out []postgres.GroupView
	f.Limit = postgres.MaxGroupLimit
	for {
		page, err := b.store.ListGroups(b.ctx, f)
		if err != nil {
			t.Fatalf("list groups %+v: %v", f, err)
		}
		out = append(out, page.Groups...)
		if page.Next == "" {
			return out
		}
		f.After = page.Next
	}
}

func TestReadGetGroup(t *testing.T) {
	t.Parallel()
	b := seeded(t)
	page, err := b.store.ListGroups(b.ctx, postgres.GroupFilter{Limit: 1})
	if err != nil || len(page.Groups) != 1 {
		t.Fatalf("list: %v %v", page, err)
	}
	want := page.Groups[0]
	got, err := b.store.GetGroup(b.ctx, want.GroupKey)
	if err != nil {
		t.Fatal(err)
	}
	if got.GroupKey != want.GroupKey || got.EffectiveVerdict != want.EffectiveVerdict || got.GroupMemberCount != want.GroupMemberCount {
		t.Errorf("get %+v, list %+v", got, want)
	}
	if got.RulesetStatus != gcos.RulesetActive || got.SnapshotRef == nil || !got.SnapshotExists {
		t.Errorf("seeded group: ruleset %s snapshot %v exists %v", got.RulesetStatus, got.SnapshotRef, got.SnapshotExists)
	}
	if _, err := b.store.GetGroup(b.ctx, "0123456789abcdef0123456789abcdef"); gcos.ErrorCode(err) != gcos.ENOTFOUND {
		t.Errorf("unknown key: %v, want ENOTFOUND", err)
	}
	if _, err := b.store.GetGroup(b.ctx, "x'; DROP TABLE governance_group; --"); gcos.ErrorCode(err) != gcos.EINVALID {
		t.Errorf("bad key: %v, want EINVALID", err)
	}
}

func TestReadGroupsBeforeAnyRuleset(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	page, err := b.store.ListGroups(b.ctx, postgres.GroupFilter{})
	if err != nil || len(page.Groups) != 0 || page.Next != "" {
		t.Fatalf("empty store: %+v, %v", page, err)
	}
	sum, err := b.store.Summary(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Groups != 0 || sum.Ruleset != nil || sum.LastSnapshot != nil || sum.OpenFindingsTotal != 0 {
		t.Errorf("empty store summary: %+v", sum)
	}
}

func TestReadSummaryCounts(t *testing.T) {
	t.Parallel()
	b := seeded(t)
	all := listAll(t, b, postgres.GroupFilter{})
	if _, err := b.store.MarkDirty(b.ctx, []string{all[0].GroupKey, all[1].GroupKey, all[2].GroupKey}, gcos.DirtyTTL); err != nil {
		t.Fatal(err)
	}
	for _, subject := range []string{"a", "b"} {
		if _, err := b.store.RaiseFinding(b.ctx, gcos.Finding{Type: gcos.IssueHandoffLag, Subject: subject, Evidence: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.RaiseFinding(b.ctx, gcos.Finding{Type: gcos.IssueCandidateScanLag, Subject: "x", Evidence: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.ResolveFinding(b.ctx, gcos.IssueCandidateScanLag, "x", ""); err != nil {
		t.Fatal(err)
	}

	sum, err := b.store.Summary(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := b.count(t, `SELECT count(*) FROM governance_group`); sum.Groups != want || sum.ScanHealth.Groups != want {
		t.Errorf("groups %d (health %d), want %d", sum.Groups, sum.ScanHealth.Groups, want)
	}
	if want := b.count(t, `SELECT coalesce(sum(member_count), 0)::bigint FROM governance_group`); sum.Objects != want {
		t.Errorf("objects %d, want %d", sum.Objects, want)
	}
	var groups, objects int64
	for v, n := range sum.Verdicts {
		if want := b.count(t, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset cr USING (ruleset_version)
			WHERE CASE WHEN c.dirty OR c.recompute_status <> 'ok' OR c.stale_after <= now() THEN
			           CASE WHEN c.candidate_verdict = 'unknown' THEN 'unknown' ELSE 'stale' END
			      ELSE c.candidate_verdict END = $1`, v); n.Groups != want {
			t.Errorf("verdict %s: %d groups, direct %d", v, n.Groups, want)
		}
		groups += n.Groups
		objects += n.Objects
	}
	if groups != sum.Groups || objects != sum.Objects {
		t.Errorf("verdicts sum to %d groups / %d objects, totals %d / %d", groups, objects, sum.Groups, sum.Objects)
	}
	groups, objects = 0, 0
	for _, sc := range sum.Scopes {
		if sc.Scope == nil {
			t.Fatal("a scope is null")
		}
		if want := b.count(t, `SELECT coalesce(sum(member_count), 0)::bigint FROM governance_group WHERE scope = $1`, *sc.Scope); sc.Objects != want {
			t.Errorf("scope %s: %d objects, want %d", *sc.Scope, sc.Objects, want)
		}
		groups += sc.Groups
		objects += sc.Objects
	}
	if groups != sum.Groups || objects != sum.Objects {
		t.Errorf("scopes sum to %d groups / %d objects, totals %d / %d", groups, objects, sum.Groups, sum.Objects)
	}
	if sum.DirtyGroups != 3 || sum.ScanHealth.DirtyGroups != 3 {
		t.Errorf("dirty %d (health %d), want 3", sum.DirtyGroups, sum.ScanHealth.DirtyGroups)
	}
	if sum.ScanHealth.OldestDirtyAt == nil || sum.ScanHealth.ScanLagSeconds < 0 {
		t.Errorf("scan lag: oldest %v lag %v", sum.ScanHealth.OldestDirtyAt, sum.ScanHealth.ScanLagSeconds)
	}
	if _, ok := sum.ScanHealth.LastRuns["backfill"]; !ok {
		t.Errorf("last runs %v lack the backfill", sum.ScanHealth.LastRuns)
	}
	active, err := postgres.ActiveRuleset(b.store, b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Ruleset == nil || sum.Ruleset.Version != active.Version || sum.Ruleset.Status != gcos.RulesetActive {
		t.Errorf("ruleset %+v, active %s", sum.Ruleset, active.Version)
	}
	if want := b.count(t, `SELECT max(id) FROM evolution_snapshots WHERE scope LIKE 'governance.%'`); sum.LastSnapshot == nil || sum.LastSnapshot.ID != want {
		t.Errorf("last snapshot %+v, want id %d", sum.LastSnapshot, want)
	}
	if want := b.count(t, `SELECT count(*) FROM system_issues WHERE status = 'open' AND coalesce_key LIKE 'gov:%'`); sum.OpenFindingsTotal != want {
		t.Errorf("open findings %d, want %d", sum.OpenFindingsTotal, want)
	}
	if sum.OpenFindings[string(gcos.IssueHandoffLag)] != 2 || sum.OpenFindings[string(gcos.IssueCandidateScanLag)] != 0 {
		t.Errorf("open findings by type: %v", sum.OpenFindings)
	}
}

func TestReadWorkers(t *testing.T) {
	t.Parallel()
	b := setup(t, 0)
	b.exec(t, `INSERT INTO queue_heartbeat (executor_name, executor_kind, last_tick_at, last_tick_status, lease_owner, lease_expires_at) VALUES
		('gcos.intake.birth_registry', 'gcos.intake', now() - interval '2 seconds', 'ok', 'host-a', now() + interval '1 minute'),
		('gcos.scan', 'gcos.scan', now() - interval '1 hour', 'ok', 'host-b', now() - interval '1 minute'),
		('gcos.scheduler', 'gcos.scheduler', NULL, NULL, NULL, NULL),
		('someone.else', 'batch', now(), 'ok', NULL, NULL)`)
	b.exec(t, `INSERT INTO gov_worker_cursor (worker_name, source, source_table, ts_column, id_column, ts_type,
		position_tstz, position_id, last_created_at, last_event_id, events_seen)
		VALUES ('gcos.intake.birth_registry', 'birth_registry', 'birth_registry', 'born_at', 'id', 'timestamptz',
		        now() - interval '10 seconds', 42, now() - interval '10 seconds', '42', 42)`)
	rep, err := b.store.Workers(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]postgres.WorkerView{}
	for _, w := range rep.Workers {
		got[w.Name] = w
	}
	if len(got) != 3 {
		t.Fatalf("workers %v: want the three gcos.* executors only", rep.Workers)
	}
	for name, want := range map[string]struct {
		state string
		lease bool
	}{
		"gcos.intake.birth_registry": {postgres.HeartbeatOK, true},
		"gcos.scan":                  {postgres.HeartbeatSilent, false},
		"gcos.scheduler":             {postgres.HeartbeatNever, false},
	} {
		w := got[name]
		if w.State != want.state || w.LeaseHeld != want.lease {
			t.Errorf("%s: state %s lease %v, want %s %v", name, w.State, w.LeaseHeld, want.state, want.lease)
		}
	}
	if a := got["gcos.scan"].AgeSeconds; a == nil || *a < 3599 {
		t.Errorf("gcos.scan age %v, want about an hour", a)
	}
	if len(rep.Cursors) != 1 || rep.Cursors[0].Source != "birth_registry" || rep.Cursors[0].EventsSeen != 42 ||
		rep.Cursors[0].PositionAgeSeconds == nil || *rep.Cursors[0].PositionAgeSeconds < 9 {
		t.Errorf("cursors %+v", rep.Cursors)
	}
}
