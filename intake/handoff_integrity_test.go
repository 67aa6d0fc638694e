package intake_test

import (
	"testing"
	"time"

	"gcos"
	"gcos/intake"
)

// integrityTrusted are the world's source systems and changelog actors: everything the generator writes is
// trusted, "mallory" and a forged "gcos:intake" are not.
var integrityTrusted = []string{"import-*", "birth-api", "registry-sync*", "birth-gateway", "ops:*", "gov:*", "measurement-generator"}

// TestIntakeEchoTrustUnmapped: GCOS recognises its own audit rows by id (no skip rule for governance_* here, so a
// name cannot be what tells them apart); a changelog row naming itself gcos:… but not written by GCOS is an ordinary
// row, here from an untrusted source; a changelog row from an untrusted source dirties nothing and emits nothing
// but is counted and raises one coalesced finding per source; a row no mapping rule matches is counted and reported
// per (source, value), never silently dropped.
func TestIntakeEchoTrustUnmapped(t *testing.T) {
	t.Parallel()
	e := newHandoffEnv(t, 800, func(c *gcos.Config) {
		c.Intake.TrustedSources = integrityTrusted
		var kinds []gcos.ChangelogRule
		for _, r := range c.Intake.ChangelogKinds {
			if r.Kind != gcos.ChangelogSkip {
				kinds = append(kinds, r)
			}
		}
		c.Intake.ChangelogKinds = kinds
	})
	var coll, class, code string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT collection_name, entity_type, entity_code FROM birth_registry
		WHERE parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &class, &code); err != nil {
		t.Fatal(err)
	}
	cursor := func() (unmapped, untrusted int64) {
		t.Helper()
		c, err := intake.New(e.Store).GetCursor(e.Ctx, "registry_changelog")
		if err != nil {
			t.Fatal(err)
		}
		return c.UnmappedRows, c.UntrustedRows
	}
	finding := func(typ gcos.IssueType, subject string) (open, occurrences, rows int64) {
		t.Helper()
		key := gcos.CoalesceKey(typ, subject)
		open = e.Count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = $1 AND status = 'open'`, key)
		occurrences = e.Count(t, `SELECT coalesce(max(occurrence_count), 0) FROM system_issues WHERE coalesce_key = $1`, key)
		rows = e.Count(t, `SELECT coalesce(max((evidence_snapshot->>'rows')::bigint), 0) FROM system_issues WHERE coalesce_key = $1`, key)
		return open, occurrences, rows
	}

	t.Run("GCOS's own audit rows are recognised by id", func(t *testing.T) {
		own := e.Count(t, `SELECT count(*) FROM governance_audit_row`)
		if own == 0 {
			t.Fatal("the set-up wrote audit rows (backfill, activation) but none is recorded as GCOS's own")
		}
		if n := e.Count(t, `SELECT count(*) FROM governance_audit_row a JOIN registry_changelog r ON r.id = a.changelog_id
			WHERE r.entity_type LIKE 'governance\_%'`); n != own {
			t.Fatalf("%d of %d recorded own rows are GCOS audit rows", n, own)
		}
		// Another own row, through the tail: skipped, not reported as unmapped.
		c, err := intake.New(e.Store).GetCursor(e.Ctx, "registry_changelog")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := intake.New(e.Store).ResetCursor(e.Ctx, "registry_changelog", c.Position); err != nil {
			t.Fatal(err)
		}
		e.catchUp(t)
		e.expectDirty(t, "own rows", nil, "")
		if u, q := cursor(); u != 0 || q != 0 {
			t.Fatalf("own rows counted as unmapped (%d) or untrusted (%d)", u, q)
		}
	})

	t.Run("a forged gcos: row and an untrusted source are quarantined, not skipped and not acted on", func(t *testing.T) {
		before := e.signalIDs(t)
		e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES
			('collection', $1, 'update', 'gcos:intake'),
			('collection', $1, 'update', 'mallory'),
			($2, $3, 'retire', 'mallory')`, coll, class, code)
		e.catchUp(t)
		e.expectDirty(t, "untrusted rows", nil, "")
		if sigs := e.newSignals(t, before); len(sigs) != 0 {
			t.Fatalf("untrusted rows emitted %+v", sigs)
		}
		if open, occ, rows := finding(gcos.InputIssue(gcos.InputUntrustedSource), "registry_changelog:mallory"); open != 1 || occ != 1 || rows != 2 {
			t.Fatalf("mallory: open %d, occurrences %d, rows %d; want one finding for 2 rows", open, occ, rows)
		}
		if open, _, rows := finding(gcos.InputIssue(gcos.InputUntrustedSource), "registry_changelog:gcos:intake"); open != 1 || rows != 1 {
			t.Fatalf("the forged gcos:intake row: open %d, rows %d; want it quarantined like any untrusted row", open, rows)
		}
		if _, q := cursor(); q != 3 {
			t.Fatalf("untrusted_rows = %d, want 3", q)
		}
		// Control: the same change from a trusted source dirties the collection's groups.
		e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES ('collection', $1, 'update', 'ops:lan.nguyen')`, coll)
		e.catchUp(t)
		if len(e.dirty(t)) == 0 {
			t.Fatal("control: a trusted collection update dirtied nothing, so the quarantine proved nothing")
		}
		e.clean(t)
	})

	t.Run("rows no rule maps are counted and reported per value", func(t *testing.T) {
		e.Exec(t, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by) VALUES
			('widget', 'w1', 'frobnicate', 'ops:lan.nguyen'), ('widget', 'w2', 'frobnicate', 'ops:lan.nguyen'),
			('widget', 'w3', 'twiddle', 'ops:lan.nguyen')`)
		e.catchUp(t)
		e.expectDirty(t, "unmapped rows", nil, "")
		if open, _, rows := finding(gcos.IssueHandoffUnmappedRow, "registry_changelog:widget/frobnicate"); open != 1 || rows != 2 {
			t.Fatalf("widget/frobnicate: open %d, rows %d", open, rows)
		}
		if open, _, rows := finding(gcos.IssueHandoffUnmappedRow, "registry_changelog:widget/twiddle"); open != 1 || rows != 1 {
			t.Fatalf("widget/twiddle: open %d, rows %d", open, rows)
		}
		if u, _ := cursor(); u != 3 {
			t.Fatalf("unmapped_rows = %d, want 3", u)
		}
	})
}

// TestHandoffCountsBirthsHandedOffEarly: a birth dated ahead of the clock is handed off at once; its collection's
// counts stop being kept (a scan counts it from the source) until the cursor has passed that birth, and are then
// kept again, equal to the source — the birth counted once, not twice and not never.
func TestHandoffCountsBirthsHandedOffEarly(t *testing.T) {
	t.Parallel()
	e := newHandoffEnv(t, 800, func(c *gcos.Config) { c.Intake.FutureTolerance = gcos.Duration(300 * time.Millisecond) })
	var coll, class string
	if err := e.Pool.QueryRow(e.Ctx, `SELECT collection_name, entity_type FROM birth_registry
		WHERE status = 'active' AND parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &class); err != nil {
		t.Fatal(err)
	}
	kept := func() int64 {
		return e.Count(t, `SELECT count(*) FROM governance_collection_count WHERE source_registry = $1`, coll)
	}
	if kept() != 1 {
		t.Fatal("the collection's counts are not kept after the history")
	}
	var bornAt time.Time
	if err := e.Pool.QueryRow(e.Ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref, born_at)
		VALUES ('early-1', $1, $2, 'active', 'birth-api', 'tester', now() + interval '3 seconds') RETURNING born_at`, coll, class).Scan(&bornAt); err != nil {
		t.Fatal(err)
	}
	e.catchUp(t)
	if c, err := intake.New(e.Store).GetCursor(e.Ctx, "birth_registry"); err != nil || c.FutureRows != 1 {
		t.Fatalf("future rows %d (%v), want the birth handed off early", c.FutureRows, err)
	}
	if kept() != 0 || e.keptCountsDiffer(t) != 0 {
		t.Fatal("the collection of a birth handed off early must not be kept meanwhile")
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := intake.New(e.Store).GetCursor(e.Ctx, "birth_registry")
		if err != nil {
			t.Fatal(err)
		}
		if c.PositionAt != nil && !c.PositionAt.Before(bornAt) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cursor never reached the early birth (at %s)", c.Position)
		}
		e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
			VALUES ('filler-' || gen_random_uuid(), $1, $2, 'active', 'birth-api', 'tester')`, coll, class)
		e.catchUp(t)
	}
	e.Exec(t, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, source_system, actor_ref)
		VALUES ('after-early', $1, $2, 'active', 'birth-api', 'tester')`, coll, class)
	e.catchUp(t)
	if kept() != 1 {
		t.Fatal("the collection is not kept again once the cursor passed the early birth")
	}
	if n := e.keptCountsDiffer(t); n != 0 {
		t.Fatalf("%d kept base counts differ from the source", n)
	}
}
