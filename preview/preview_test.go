package preview_test

import (
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/gcostest"
	"gcos/preview"
)

// TestPreviewWritesNothing: previews of every kind, answered or refused, leave every row of every table (source,
// substrate and GCOS's own) and every sequence as they were.
func TestPreviewWritesNothing(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 1200, Seed: 8})
	ctx, pool := w.Ctx, w.Pool
	state := func() map[string]string {
		t.Helper()
		rows, err := pool.Query(ctx, `SELECT 'table ' || c.relname, c.oid::regclass::text, c.relkind
			FROM pg_class c WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'S') ORDER BY 1`)
		if err != nil {
			t.Fatal(err)
		}
		type rel struct{ name, ident, kind string }
		var rels []rel
		for rows.Next() {
			var r rel
			if err := rows.Scan(&r.name, &r.ident, &r.kind); err != nil {
				t.Fatal(err)
			}
			rels = append(rels, r)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, r := range rels {
			sql := `SELECT md5(coalesce(string_agg(x::text, '|' ORDER BY x::text), '')) FROM ` + r.ident + ` x`
			if r.kind == "S" {
				sql = `SELECT last_value::text || ':' || is_called::text FROM ` + r.ident
			}
			var sum string
			if err := pool.QueryRow(ctx, sql).Scan(&sum); err != nil {
				t.Fatalf("%s: %v", r.name, err)
			}
			out[r.name] = sum
		}
		return out
	}
	var ownership int64
	var coll, code, class, scope, exception string
	if err := pool.QueryRow(ctx, `SELECT min(id) FROM governance_object_ownership WHERE status = 'active'`).Scan(&ownership); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT collection_name, entity_code, entity_type FROM birth_registry
		WHERE status = 'active' AND parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&coll, &code, &class); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT min(scope_code) FROM governance_responsibility_scope`).Scan(&scope); err != nil {
		t.Fatal(err)
	}
	exception = "EXC-NONE"
	_ = pool.QueryRow(ctx, `SELECT min(exception_id) FROM governance_exception WHERE status = 'approved'`).Scan(&exception)
	before := state()
	p := preview.New(w.Store)
	future := time.Now().Add(time.Hour)
	requests := []gcos.PreviewRequest{
		{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: &ownership}}},
		{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewOwnerAssign, Scope: &scope, EntityType: &class, OwnerRef: gcos.Str("t")},
			{Kind: gcos.PreviewExceptionGrant, Scope: &scope, Collection: &coll, EntityCode: &code, ApprovalRef: gcos.Str("A"), ExpiresAt: &future},
			{Kind: gcos.PreviewCoverageStatus, Collection: &coll, ScopeClass: gcos.Str("USER_EXCLUDED")},
			{Kind: gcos.PreviewCoverageProfile, EntityType: &class, RiskClass: gcos.Str("read_descriptive")}}},
		{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewObjectRetire, Collection: &coll, EntityCode: &code}}, Action: gcos.ActionRead},
		{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewExceptionChange, ExceptionID: &exception, Status: gcos.Str("pending")}}},
		{Changes: []gcos.ProposedChange{{Kind: gcos.PreviewRulesetActivate, RulesetVersion: gcos.Str("no-such-version")}}},
	}
	for _, req := range requests {
		rep, err := p.Preview(ctx, req)
		t.Logf("%s: %d groups judged, flips %+d/%+d, err %v", req.Changes[0].Kind, rep.AffectedGroups, rep.Flips.AllowToBlock, rep.Flips.BlockToAllow, err)
	}
	after := state()
	if len(before) < 20 {
		t.Fatalf("only %d relations read: the check reads the wrong schema", len(before))
	}
	for name, sum := range before {
		if after[name] != sum {
			t.Errorf("%s changed under a preview", name)
		}
	}
}

// TestPreviewRefuses: a request the registries cannot take is EINVALID, naming the problem.
func TestPreviewRefuses(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 600, Seed: 9})
	p := preview.New(w.Store)
	var draft string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'`).Scan(&draft); err != nil {
		t.Fatal(err)
	}
	var scope string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT min(scope_code) FROM governance_responsibility_scope`).Scan(&scope); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	for _, c := range []struct {
		change gcos.ProposedChange
		want   string
	}{
		{gcos.ProposedChange{Kind: gcos.PreviewOwnerAssign, Scope: gcos.Str("no-such-scope"), OwnerRef: gcos.Str("t")}, "not a responsibility scope"},
		{gcos.ProposedChange{Kind: gcos.PreviewOwnerAssign, Scope: &scope, OwnerRef: gcos.Str("t"), EntityType: gcos.Str("nope")}, "not in meta_catalog"},
		{gcos.ProposedChange{Kind: gcos.PreviewExceptionRevoke, ExceptionID: gcos.Str("EXC-NOPE")}, "exception \"EXC-NOPE\" is not in"},
		{gcos.ProposedChange{Kind: gcos.PreviewCoverageStatus, Collection: gcos.Str("no_such_collection"), CoverageStatus: gcos.Str("X")}, "not in collection_registry"},
		{gcos.ProposedChange{Kind: gcos.PreviewCoverageProfile, EntityType: gcos.Str("no_such_class"), RiskClass: gcos.Str("x")}, "has no row in"},
		{gcos.ProposedChange{Kind: gcos.PreviewObjectRetire, Collection: gcos.Str("nope"), EntityCode: gcos.Str("x")}, "has no birth"},
		{gcos.ProposedChange{Kind: gcos.PreviewExceptionGrant, ApprovalRef: gcos.Str("A"), ExpiresAt: &past}, "not in the future"},
		{gcos.ProposedChange{Kind: gcos.PreviewRulesetActivate, RulesetVersion: &draft}, "only a draft can be activated"},
		{gcos.ProposedChange{Kind: gcos.PreviewRulesetActivate, RulesetVersion: gcos.Str("v-none")}, "does not exist"},
	} {
		_, err := p.Preview(w.Ctx, gcos.PreviewRequest{Changes: []gcos.ProposedChange{c.change}})
		if gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(gcos.ErrorMessage(err), c.want) {
			t.Errorf("%s: %v; want EINVALID naming %q", c.change.Kind, err, c.want)
		}
	}
}
