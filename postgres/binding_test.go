package postgres_test

import (
	"strings"
	"testing"

	"gcos"
	"gcos/events"
	"gcos/gcostest"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// TestSourceBindingDrivesEveryRead renames, in one database, a table and a column of each kind the source binding
// names (the birth table and its columns, the axis registry with its key column, the scope and ownership
// registries) and binds the new names in the configuration: the substrate verifies, the backfill derives the same
// groups and verdicts, and the gate and the owner resolver answer the same, as over the default names.
func TestSourceBindingDrivesEveryRead(t *testing.T) {
	t.Parallel()
	base := setup(t, 3000)
	want := bundleOf(gcostest.Over(t, pgtest.Clone(t, base.pool), nil))
	renamedPool := pgtest.Clone(t, base.pool)
	if _, err := renamedPool.Exec(base.ctx, `
		ALTER TABLE birth_registry RENAME TO born_object;
		ALTER TABLE born_object RENAME COLUMN status TO life_state;
		ALTER TABLE born_object RENAME COLUMN entity_code TO object_code;
		ALTER TABLE pivot_definitions RENAME TO axis_pivot;
		ALTER TABLE axis_pivot RENAME COLUMN axis_family TO family;
		ALTER TABLE axis_pivot RENAME COLUMN entity_type TO class_code;
		ALTER TABLE governance_responsibility_scope RENAME TO responsibility;
		ALTER TABLE responsibility RENAME COLUMN scope_code TO code;
		ALTER TABLE governance_object_ownership RENAME TO object_owner;
		ALTER TABLE object_owner RENAME COLUMN owner_ref TO owner`); err != nil {
		t.Fatal(err)
	}
	renamed := bundleOf(gcostest.Over(t, renamedPool, func(cfg *gcos.Config) {
		sb := &cfg.SourceBinding
		sb.Birth.Table, sb.Birth.EntityCode = "born_object", "object_code"
		sb.ObjectClass.Table, sb.SourceRegistry.Table = "born_object", "born_object"
		sb.LifecycleStatus = gcos.ColumnBinding{Table: "born_object", Column: "life_state"}
		sb.AxisFamily = gcos.ColumnBinding{Table: "axis_pivot", Column: "family", KeyColumn: "class_code"}
		sb.Scope = gcos.ColumnBinding{Table: "responsibility", Column: "code"}
		sb.OwnerScope = gcos.ColumnBinding{Table: "object_owner", Column: "owner"}
	}))

	// The default names no longer exist: a store bound to them is refused at start, naming what is missing.
	if _, err := postgres.New(renamed.pool, gcos.DefaultConfig(), nil).Prepare(renamed.ctx, postgres.PrepareOptions{}); err == nil ||
		!strings.Contains(err.Error(), "birth_registry") {
		t.Fatalf("prepare under the default binding = %v, want the missing birth_registry named", err)
	}
	// A bound column the table lacks is refused at start, named as table.column.
	wrong := renamed.cfg
	wrong.SourceBinding.OwnerScope.Column = "owner_ref"
	if _, err := postgres.New(renamed.pool, wrong, nil).Prepare(renamed.ctx, postgres.PrepareOptions{}); err == nil ||
		!strings.Contains(err.Error(), "object_owner.owner_ref") {
		t.Fatalf("prepare with a wrong owner column = %v, want object_owner.owner_ref named", err)
	}
	if _, err := renamed.store.Prepare(renamed.ctx, postgres.PrepareOptions{}); err != nil {
		t.Fatalf("prepare under the renamed binding: %v", err)
	}

	for _, b := range []*bundle{want, renamed} {
		b.backfill(t)
	}
	for _, q := range []string{
		`SELECT group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, member_count
		 FROM governance_group`,
		`SELECT group_key, ruleset_version, candidate_verdict, input_quality_state, risk_class FROM governance_candidate_state`,
		`SELECT object_ref, group_key, candidate_verdict FROM governance_candidate_object`,
	} {
		if got, exp := renamed.digest(t, q), want.digest(t, q); got != exp {
			t.Errorf("%s\ndiffers under the renamed binding", q)
		}
	}
	if n := want.count(t, `SELECT count(DISTINCT axis_family) FROM governance_group WHERE owner_scope IS NOT NULL`); n < 2 {
		t.Fatalf("the world binds too little to compare: %d axis families among owned groups", n)
	}

	// The gate reads the births by the bound names; so does the owner resolver read the registries.
	objects := want.strs(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 40`)
	for _, o := range objects {
		got, exp := renamed.gate().Gate(renamed.ctx, o, "write"), want.gate().Gate(want.ctx, o, "write")
		if got.Decision != exp.Decision || strings.Join(got.Reasons, ";") != strings.Join(exp.Reasons, ";") {
			t.Errorf("gate %s: renamed %s %v, default %s %v", o, got.Decision, got.Reasons, exp.Decision, exp.Reasons)
		}
	}
	queries := []events.OwnerQuery{{Scope: "policy"}, {Scope: "health"}, {Scope: "nosuch"}}
	for _, row := range want.strs(t, `SELECT scope_code || '|' || coalesce(entity_type, '') || '|' || coalesce(collection_name, '')
		FROM governance_object_ownership ORDER BY id LIMIT 5`) {
		f := strings.Split(row, "|")
		queries = append(queries, events.OwnerQuery{Scope: f[0], EntityType: f[1], CollectionName: f[2]})
	}
	for _, q := range queries {
		got, err1 := events.New(renamed.store).ResolveOwner(renamed.ctx, q)
		exp, err2 := events.New(want.store).ResolveOwner(want.ctx, q)
		if err1 != nil || err2 != nil || got.OwnerRef != exp.OwnerRef || got.Source != exp.Source || got.RowID != exp.RowID {
			t.Errorf("owner of %+v: renamed %+v (%v), default %+v (%v)", q, got, err1, exp, err2)
		}
	}
}
