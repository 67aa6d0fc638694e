package oracle_test

import (
	"log/slog"
	"strings"
	"testing"

	"gcos"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/postgres/pgtest"
	"gcos/scan"
	"gcos/world"
)

// TestAbsentRegistriesDegrade is a first deployment as the seeds record the live estate: SB-2's responsibility
// scopes, the ownership registry, the coverage profile or the axis registry may not exist yet. With each of them
// absent GCOS migrates (saying at start what is missing and what degrades), backfills, audits, answers the gate and
// closes its ledger, degrading as the contract says (one implicit scope unscoped, owner_scope null, unknown risk
// treated as high, no axis family) and guessing nothing: its state still equals a from-scratch evaluation.
func TestAbsentRegistriesDegrade(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		drop    []string
		degrade string // the SQL count of groups that do not show the degradation: 0 without the registry, > 0 with it
		rows    string // the SQL count of groups that the degradation reaches: must be > 0
	}{
		{"responsibility scopes", []string{gcos.TableScopes},
			`SELECT count(*) FROM governance_group WHERE scope IS DISTINCT FROM '` + gcos.UnscopedScope + `'`,
			`SELECT count(*) FROM governance_group`},
		{"ownership registry", []string{gcos.TableOwnership},
			`SELECT count(*) FROM governance_candidate_state WHERE owner_scope IS NOT NULL`,
			`SELECT count(*) FROM governance_candidate_state`},
		{"coverage profile", []string{gcos.TableCoverageProfile},
			`SELECT count(*) FROM governance_candidate_state WHERE risk_class IS NOT NULL AND risk_class <> 'unknown'`,
			`SELECT count(*) FROM governance_candidate_state`},
		{"axis registry", []string{gcos.TablePivots, gcos.TableJurisdiction},
			`SELECT count(*) FROM governance_group WHERE axis_family IS NOT NULL`,
			`SELECT count(*) FROM governance_group`},
	}
	// With every registry present each dimension is filled: the counts below would catch a degradation that did
	// not happen.
	t.Run("every registry present", func(t *testing.T) {
		t.Parallel()
		w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 64})
		if _, err := scan.New(w.Store).FullAudit(w.Ctx, nil); err != nil {
			t.Fatal(err)
		}
		for _, tc := range cases {
			if n := w.Count(t, tc.degrade); n == 0 {
				t.Errorf("with %v present no group has the dimension (%s)", tc.drop, tc.degrade)
			}
		}
	})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := pgtest.NewDB(t)
			w := gcostest.Over(t, pool, nil)
			if _, err := world.Generate(w.Ctx, pool, world.Options{Births: 3000, Seed: 64}); err != nil {
				t.Fatal(err)
			}
			w.Exec(t, `DROP TABLE `+strings.Join(tc.drop, ", "))

			// Start-up: the substrate check passes and says, in one line, what is missing and what degrades.
			var log gcostest.LogBuffer
			if _, err := postgres.New(pool, w.Cfg, slog.New(slog.NewTextHandler(&log, nil))).Prepare(w.Ctx, postgres.PrepareOptions{}); err != nil {
				t.Fatalf("migrate without %v: %v", tc.drop, err)
			}
			line := log.String()
			for _, table := range tc.drop {
				if !strings.Contains(line, "optional registries absent") || !strings.Contains(line, table+": ") {
					t.Errorf("the start-up log does not say that %s is absent and what degrades:\n%s", table, line)
				}
			}

			w.Activate(t, w.Backfill(t).RulesetVersion)
			if _, err := scan.New(w.Store).FullAudit(w.Ctx, nil); err != nil {
				t.Fatalf("full audit: %v", err)
			}
			if n := w.Count(t, tc.degrade); n != 0 {
				t.Errorf("%d groups do not degrade (%s)", n, tc.degrade)
			}
			if n := w.Count(t, tc.rows); n == 0 {
				t.Fatalf("no group to degrade (%s)", tc.rows)
			}

			// The gate fails closed: no write is allowed on an object whose risk it cannot know.
			g := gate.New(w.Store, nil)
			allowed := 0
			for _, object := range w.Strings(t, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 300`) {
				res := g.Decide(w.Ctx, object, gcos.ActionWrite)
				if res.Decision != gcos.GateAllow {
					continue
				}
				allowed++
				if tc.drop[0] == gcos.TableCoverageProfile {
					t.Errorf("%s: allowed a write with no coverage profile (risk unknown): %v", object, res.Reasons)
				}
			}
			t.Logf("without %v: %d of 300 writes allowed", tc.drop, allowed)

			// The ledger closes in every scope, and the state is the one a from-scratch evaluation gives.
			ledger, err := g.Invariant(w.Ctx, "")
			if err != nil || !ledger.Closes || len(ledger.Ledgers) == 0 {
				t.Fatalf("the ledger without %v: %+v, %v", tc.drop, ledger, err)
			}
			rep, err := oracle.Verify(w.Ctx, w.Store, oracle.VerifyOptions{Sample: 200, Seed: 64})
			if err != nil || !rep.Clean() {
				t.Fatalf("incremental and from scratch disagree without %v: %v %v", tc.drop, err, rep.Mismatches)
			}
		})
	}
}
