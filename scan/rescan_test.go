package scan_test

import (
	"slices"
	"testing"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/scan"
)

// TestGateRescansAStaleHighRiskGroup: a high-risk object the gate allows at rest blocks once its group is dirty
// for a reason a verdict rests on; with the scan stage's re-scan attached the gate re-scans that one group and
// answers from the fresh verdict. When the re-scan cannot finish within gate.rescan_deadline (another transaction
// holds the group's row) the gate blocks, and answers allow again once the row is free.
func TestGateRescansAStaleHighRiskGroup(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 5, Config: func(cfg *gcos.Config) {
		cfg.Gate.View = false
		cfg.Gate.RescanDeadline = gcos.Duration(time.Minute) // generous: the race detector slows the scan
	}})
	store, ctx := w.Store, w.Ctx
	objects, err := store.Pool().Query(ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry
		WHERE parent_code IS NULL ORDER BY id LIMIT 400`)
	if err != nil {
		t.Fatal(err)
	}
	var candidates []string
	for objects.Next() {
		var o string
		if err := objects.Scan(&o); err != nil {
			t.Fatal(err)
		}
		candidates = append(candidates, o)
	}
	objects.Close()
	var object string
	var groups []string
	plain := gate.New(store, nil) // no re-scanner
	for _, o := range candidates {
		res := plain.Decide(ctx, o, gcos.ActionWrite)
		if res.Decision != gcos.GateAllow || slices.Contains(store.Config().Gate.LowRiskClasses, res.RiskClass) {
			continue
		}
		object, groups = o, nil
		for _, c := range res.Consulted {
			if c.Source == gcos.GateSourceGroup {
				groups = append(groups, c.Key)
			}
		}
		break
	}
	if object == "" {
		t.Fatal("no high-risk object allowed at rest among the first births")
	}
	dirty := func() {
		t.Helper()
		if n, err := store.MarkDirty(ctx, groups, gcos.DirtyAxis); err != nil || n == 0 {
			t.Fatalf("mark %v dirty: %d %v", groups, n, err)
		}
	}
	clean := func() bool {
		t.Helper()
		var n int
		if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM governance_candidate_state c JOIN v_current_ruleset USING (ruleset_version)
			WHERE c.group_key = ANY($1) AND c.dirty`, groups).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	}

	dirty()
	if res := plain.Gate(ctx, object, gcos.ActionWrite); res.Decision != gcos.GateBlock || res.Rescanned {
		t.Fatalf("no re-scan attached, a dirty high-risk group: %s rescanned=%v (%v), want block", res.Decision, res.Rescanned, res.Reasons)
	}
	rescanning := gate.New(store, scan.New(store).RescanGroups)
	res := rescanning.Gate(ctx, object, gcos.ActionWrite)
	if res.Decision != gcos.GateAllow || !res.Rescanned || res.Source != gate.SourceDatabase {
		t.Fatalf("re-scan attached: %s rescanned=%v source=%s (%v), want allow from the re-scanned verdict", res.Decision, res.Rescanned, res.Source, res.Reasons)
	}
	if !clean() {
		t.Fatal("the gate's re-scan left the group dirty")
	}

	// A batch blocked on the stale groups of one of its objects re-scans them once and answers again, whole, from
	// the fresh verdicts.
	dirty()
	batch := []gcos.GateCheck{{Object: candidates[len(candidates)-1], Action: gcos.ActionRead}, {Object: object}, {Object: object, Action: gcos.ActionRead}}
	before := rescanning.DecideBatch(ctx, batch, gate.GateOptions{})
	if before.Results[1].Decision != gcos.GateBlock {
		t.Fatalf("a dirty high-risk group, asked in a batch with no re-scan: %s (%v)", before.Results[1].Decision, before.Results[1].Reasons)
	}
	got := rescanning.GateBatch(ctx, batch, gate.GateOptions{})
	if !got.Rescanned || got.Source != gate.SourceDatabase || got.Results[1].Decision != gcos.GateAllow || !got.Results[1].Rescanned {
		t.Fatalf("a batch with a stale high-risk object: rescanned=%v source=%s, %s (%v)", got.Rescanned, got.Source, got.Results[1].Decision, got.Results[1].Reasons)
	}
	for i, r := range got.Results {
		if r.Token != got.Token || r.Object != batch[i].Object {
			t.Fatalf("answer %d (%s) from token %s, the batch's %s", i, r.Object, r.Token, got.Token)
		}
	}
	if !clean() {
		t.Fatal("the batch's re-scan left the group dirty")
	}

	// Past the deadline: a store with a short one, while a transaction holds the group's rows.
	cfg := store.Config()
	cfg.Gate.RescanDeadline = gcos.Duration(50 * time.Millisecond)
	shortStore := postgres.New(store.Pool(), cfg, nil)
	short := gate.New(shortStore, scan.New(shortStore).RescanGroups)
	dirty()
	hold, err := store.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Exec(ctx, `SELECT 1 FROM governance_candidate_state WHERE group_key = ANY($1) FOR UPDATE`, groups); err != nil {
		t.Fatal(err)
	}
	if res := short.Gate(ctx, object, gcos.ActionWrite); res.Decision != gcos.GateBlock || res.Rescanned {
		t.Fatalf("re-scan held past the deadline: %s rescanned=%v (%v), want block", res.Decision, res.Rescanned, res.Reasons)
	}
	if clean() {
		t.Fatal("the group was re-scanned through a held row")
	}
	if err := hold.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The re-scan runs on after its caller stopped waiting; a caller after it re-scans if it could not.
	var last gate.GateResult
	if !wait.Until(time.Minute, func() bool {
		last = short.Gate(ctx, object, gcos.ActionWrite)
		return last.Decision == gcos.GateAllow && clean()
	}) {
		t.Fatalf("a minute after the row was freed the gate still answers %s (%v)", last.Decision, last.Reasons)
	}
}
