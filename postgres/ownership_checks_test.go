package postgres_test

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// ruleset_unowned is raised for the ruleset verdicts are read under while its proposer or approver is not a
// configured principal, announced, and resolved once the configuration knows them.
func TestRulesetUnowned(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	cfg := gcos.DefaultConfig()
	cfg.Principals = []gcos.Principal{{Name: "bob", Roles: []string{gcos.RoleOperator}},
		{Name: "alice", Roles: []string{gcos.RoleApprover}}}
	store := postgres.New(pool, cfg, nil)
	e := &bundle{ctx: ctx, pool: pool, store: store, cfg: cfg}
	check := func(principals []gcos.Principal) {
		t.Helper()
		if err := store.InTx(ctx, func(tx pgx.Tx) error { return postgres.CheckRulesetOwnerTx(ctx, tx, principals, "run-1") }); err != nil {
			t.Fatal(err)
		}
	}
	open := func() []string {
		t.Helper()
		return e.strs(t, `SELECT coalesce_key || ' ' || (evidence_snapshot::jsonb ->> 'reasons') FROM system_issues
			WHERE issue_type = 'ruleset_unowned' AND status = 'open' ORDER BY id`)
	}
	draft, _, err := store.ComputeRuleset(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	check(cfg.Principals)
	key := gcos.CoalesceKey(gcos.IssueRulesetUnowned, draft.Version)
	if got := open(); !slices.Equal(got, []string{key + ` ["a draft judges: no approver has ratified the ruleset verdicts are read under"]`}) {
		t.Fatalf("a judging draft: %v", got)
	}
	// An approver the configuration does not know, or one without the approver role, is refused: nothing changes.
	for _, who := range []string{"carol", "bob"} {
		if _, err := store.ActivateRuleset(ctx, draft.Version, "APR-1", who); gcos.ErrorCode(err) != gcos.EFORBIDDEN {
			t.Fatalf("activation by %s: %v, want forbidden", who, err)
		}
	}
	if got := open(); len(got) != 1 || e.count(t, `SELECT count(*) FROM governance_ruleset WHERE status = 'active'`) != 0 {
		t.Fatalf("a refused activation changed something: %v", got)
	}
	// Activated by the configured approver: the activation itself re-checks, and the draft's finding resolves.
	if _, err := store.ActivateRuleset(ctx, draft.Version, "APR-1", "alice"); err != nil {
		t.Fatal(err)
	}
	if got := open(); len(got) != 0 {
		t.Fatalf("owned, still open: %v", got)
	}
	// The configuration moves under an active ruleset: the check names what no longer holds.
	check([]gcos.Principal{{Name: "bob"}, {Name: "alice", Roles: []string{gcos.RoleReader}}})
	if got := open(); !slices.Equal(got, []string{key + ` ["approver \"alice\" does not hold the approver role"]`}) {
		t.Fatalf("an approver without the role: %v", got)
	}
	check([]gcos.Principal{{Name: "bob"}})
	if got := open(); !slices.Equal(got, []string{key + ` ["approver \"alice\" is not a configured principal"]`}) {
		t.Fatalf("an unknown approver: %v", got)
	}
	check(cfg.Principals)
	if got := open(); len(got) != 0 {
		t.Fatalf("owned, still open: %v", got)
	}
	// Off without principals: nothing raised, nothing resolved.
	check(nil)
	if n := e.count(t, `SELECT count(*) FROM system_issues WHERE issue_type = 'ruleset_unowned' AND status = 'open'`); n != 0 {
		t.Fatalf("%d open with the check off", n)
	}
	// Every transition was announced (captured: the vocabulary is not active here).
	got := e.strs(t, `SELECT capture_payload->'safe_payload'->>'transition' FROM event_pending
		WHERE event_type_hint = 'governance.ruleset.unowned' ORDER BY id`)
	if !slices.Equal(got, []string{"opened", "resolved", "reopened", "resolved"}) {
		t.Fatalf("announced %v, want opened, resolved, reopened, resolved", got)
	}
}

// axis_unregistered names each axis family that groups with members carry and the axis registry no longer holds.
func TestAxisUnregistered(t *testing.T) {
	t.Parallel()
	pool := pgtest.NewDB(t)
	ctx := context.Background()
	store := postgres.New(pool, gcos.DefaultConfig(), nil)
	e := &bundle{ctx: ctx, pool: pool, store: store, cfg: store.Config()}
	e.exec(t, `INSERT INTO pivot_definitions (pivot_code, axis_family, entity_type) VALUES ('p1', 'geo', 'invoice')`)
	e.exec(t, `INSERT INTO governance_group (group_key, object_class, axis_family, member_count) VALUES
		('00000000000000000000000000000001', 'invoice', 'geo', 3),
		('00000000000000000000000000000002', 'ticket', 'time', 2),
		('00000000000000000000000000000003', 'ticket', 'time', 1),
		('00000000000000000000000000000004', 'memo', 'gone', 0)`)
	check := func() []string {
		t.Helper()
		if err := store.InTx(ctx, func(tx pgx.Tx) error {
			return postgres.CheckAxesTx(ctx, tx, store.Config().SourceBinding, "run-1", "")
		}); err != nil {
			t.Fatal(err)
		}
		return e.strs(t, `SELECT coalesce_key || ' groups=' || (evidence_snapshot::jsonb ->> 'groups') FROM system_issues
			WHERE issue_type = 'axis_unregistered' AND status = 'open' ORDER BY coalesce_key`)
	}
	// "gone" names an empty group: nothing is governed under it.
	if got := check(); !slices.Equal(got, []string{"gov:coverage:axis_unregistered:time groups=2"}) {
		t.Fatalf("open %v", got)
	}
	if got := check(); len(got) != 1 || e.count(t, `SELECT occurrence_count FROM system_issues WHERE issue_type = 'axis_unregistered'`) != 2 {
		t.Fatalf("a second check should repeat the open finding: %v", got)
	}
	e.exec(t, `INSERT INTO pivot_definitions (pivot_code, axis_family, entity_type) VALUES ('p2', 'time', 'ticket')`)
	if got := check(); len(got) != 0 {
		t.Fatalf("registered, still open: %v", got)
	}
}
