package postgres_test

import (
	"regexp"
	"slices"
	"testing"

	"gcos"
	"gcos/events"
	"gcos/intake"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// TestCheckListsMatchTheGoEnums reads every CHECK (column IN (…)) of GCOS's own tables from the migrated catalog and
// compares it with the Go list that names the same values. A CHECK list no Go list accounts for fails too, so a new
// enumerated column is mapped here when it is added.
func TestCheckListsMatchTheGoEnums(t *testing.T) {
	t.Parallel()
	verdicts := make([]string, len(gcos.StoredVerdicts))
	for i, v := range gcos.StoredVerdicts {
		verdicts[i] = string(v)
	}
	qualities := make([]string, len(gcos.InputQualities))
	for i, q := range gcos.InputQualities {
		qualities[i] = string(q)
	}
	outcomes := make([]string, len(gcos.CoverageOutcomes))
	for i, o := range gcos.CoverageOutcomes {
		outcomes[i] = string(o)
	}
	want := map[string][]string{
		"governance_ruleset.status":                          gcos.RulesetStatuses,
		"governance_candidate_state.candidate_verdict":       verdicts,
		"governance_candidate_state.input_quality_state":     qualities,
		"governance_candidate_state.recompute_status":        gcos.RecomputeStatuses,
		"governance_candidate_state.lifecycle_status":        gcos.LifecycleStatuses,
		"governance_candidate_object.candidate_verdict":      verdicts,
		"governance_candidate_object.input_quality_state":    qualities,
		"governance_candidate_object.recompute_status":       gcos.RecomputeStatuses,
		"governance_candidate_object.lifecycle_status":       gcos.LifecycleStatuses,
		"governance_candidate_object.materialization_reason": gcos.ObjectRowReasons,
		"candidate_scan_run.mode":                            postgres.ScanModes,
		"candidate_scan_run.phase":                           postgres.RunPhases,
		"candidate_scan_run.status":                          postgres.RunStatuses,
		"gov_worker_cursor.ts_type":                          intake.TSTypes,
		"gcos_change_feed.kind":                              postgres.FeedKinds,
		"gcos_verdict_change.subject":                        postgres.VerdictChangeSubjects,
		"gcos_event_escalation.outcome":                      events.EscalationOutcomes,
		"governance_candidate_coverage.outcome":              outcomes,
	}
	pool := pgtest.NewEmptyDB(t)
	b := &bundle{ctx: t.Context(), pool: pool, store: postgres.New(pool, gcos.DefaultConfig(), nil)}
	if _, err := b.store.Prepare(b.ctx, postgres.PrepareOptions{CreateSubstrate: true}); err != nil {
		t.Fatalf("prepare: %v", err)
	}
	rows, err := pool.Query(b.ctx, `
		SELECT c.conrelid::regclass::text, pg_get_constraintdef(c.oid)
		FROM pg_constraint c JOIN pg_class r ON r.oid = c.conrelid
		WHERE c.contype = 'c' AND r.relnamespace = current_schema()::regnamespace AND NOT r.relispartition
		  AND (r.relname LIKE 'governance\_%' OR r.relname LIKE 'candidate\_%' OR r.relname LIKE 'gov\_%' OR r.relname LIKE 'gcos\_%')
		  AND r.relname NOT IN ('governance_coverage_profile', 'governance_responsibility_scope',
		                        'governance_object_ownership', 'governance_exception')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// pg_get_constraintdef renders `col IN ('a', 'b')` as `(col = ANY (ARRAY['a'::text, 'b'::text]))`.
	inList := regexp.MustCompile(`\(\(?(\w+) = ANY \(+ARRAY\[([^\]]*)\]`)
	value := regexp.MustCompile(`'([^']*)'`)
	seen := map[string]bool{}
	for rows.Next() {
		var table, def string
		if err := rows.Scan(&table, &def); err != nil {
			t.Fatal(err)
		}
		for _, m := range inList.FindAllStringSubmatch(def, -1) {
			col := table + "." + m[1]
			var got []string
			for _, v := range value.FindAllStringSubmatch(m[2], -1) {
				got = append(got, v[1])
			}
			exp, ok := want[col]
			if !ok {
				t.Errorf("CHECK %s IN %v: no Go list names these values; map it in this test", col, got)
				continue
			}
			seen[col] = true
			slices.Sort(got)
			exp = slices.Sorted(slices.Values(exp))
			if !slices.Equal(got, exp) {
				t.Errorf("CHECK %s IN %v, Go list %v", col, got, exp)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for col, exp := range want {
		if !seen[col] {
			t.Errorf("%s: the Go list %v has no CHECK list in the catalog", col, exp)
		}
	}
}
