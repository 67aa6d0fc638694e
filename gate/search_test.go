package gate_test

import (
	"slices"
	"strings"
	"testing"

	"gcos"
	"gcos/gate"
)

// TestSearchResources_OneInstantAcrossProcesses: a search begun on one gate is continued on another over the same
// database (another GCOS process) while the state moves, and finds exactly what the first page's state allows —
// which is what the gate itself allows at that state, object by object.
func TestSearchResources_OneInstantAcrossProcesses(t *testing.T) {
	t.Parallel()
	b := seededWorld(t, 2000, nil)
	gA := b.gate()
	gB := gate.New(b.store, nil)
	t.Cleanup(gA.ReleaseSearches)
	t.Cleanup(gB.ReleaseSearches)
	var coll string
	if err := b.pool.QueryRow(b.ctx, `SELECT collection_name FROM birth_registry GROUP BY 1 ORDER BY count(*) DESC LIMIT 1`).Scan(&coll); err != nil {
		t.Fatal(err)
	}
	rows, err := b.pool.Query(b.ctx, `SELECT entity_code FROM birth_registry WHERE collection_name = $1 ORDER BY entity_code`, coll)
	if err != nil {
		t.Fatal(err)
	}
	var all []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		all = append(all, c)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, code := range all {
		if gA.GateWith(b.ctx, coll+":"+code, gcos.ActionWrite, gate.GateOptions{Consistency: gate.ConsistencyFull}).Decision == gcos.GateAllow {
			want = append(want, code)
		}
	}
	if len(want) == 0 || len(want) == len(all) {
		t.Fatalf("%d of %d allowed: nothing to prove", len(want), len(all))
	}

	q := gate.SearchQuery{Collection: coll, Action: gcos.ActionWrite, Limit: 4}
	first, err := gA.SearchResources(b.ctx, q)
	if err != nil || first.Next == "" || first.Token == "" || first.AsOf.IsZero() {
		t.Fatalf("first page: %+v %v", first, err)
	}
	// The state moves: every allowed object of the collection turns blocked.
	b.exec(t, `UPDATE governance_candidate_state SET recompute_status = 'failed'
		WHERE group_key IN (SELECT group_key FROM governance_group WHERE source_registry = $1)`, coll)
	got := first.Codes
	for q.PageToken = first.Next; q.PageToken != ""; {
		p, err := gB.SearchResources(b.ctx, q) // another process
		if err != nil {
			t.Fatal(err)
		}
		if !p.AsOf.Equal(first.AsOf) || p.Token != first.Token || len(p.Codes) > q.Limit {
			t.Fatalf("a later page reads %s %s, the first %s %s", p.AsOf, p.Token, first.AsOf, first.Token)
		}
		got = append(got, p.Codes...)
		q.PageToken = p.Next
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the search found %v, the first page's state allows %v", got, want)
	}
	if gA.Held() != 0 {
		// The last page was answered by B: A's hold ends with its timer (gate.search_hold), not before.
		gA.ReleaseSearches()
	}
	after, err := gA.SearchResources(b.ctx, gate.SearchQuery{Collection: coll, Action: gcos.ActionWrite, Limit: 1000})
	if err != nil || slices.Equal(after.Codes, want) {
		t.Fatalf("after the change a new search finds %d (was %d), %v: the change proves nothing", len(after.Codes), len(want), err)
	}
	// Once the holder lets go, the search cannot go on from another state.
	second, err := gA.SearchResources(b.ctx, gate.SearchQuery{Collection: coll, Action: gcos.ActionRead, Limit: 1})
	if err != nil || second.Next == "" {
		t.Fatalf("%+v %v", second, err)
	}
	gA.ReleaseSearches()
	_, err = gB.SearchResources(b.ctx, gate.SearchQuery{Collection: coll, Action: gcos.ActionRead, Limit: 1, PageToken: second.Next})
	if err == nil || gcos.ErrorCode(err) != gcos.EINVALID || !strings.Contains(gcos.ErrorMessage(err), "no longer held") {
		t.Fatalf("a page of a released search: %v", err)
	}
}
