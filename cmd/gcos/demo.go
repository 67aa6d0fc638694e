package main

import (
	"context"
	"time"

	"gcos"
	"gcos/events"
	"gcos/intake"
	"gcos/postgres"
	"gcos/world"
)

// demoOperator is the demo's operator: subscribed to every finding's announcements, so `gcos notifications list
// --by demo-operator` has something to work.
const demoOperator = "demo-operator"

// demoWorld loads the synthetic world into an empty database, seeds it and activates its ruleset as a demo
// approver (never the proposer), and registers and activates the governance event vocabulary.
func (a *app) demoWorld(ctx context.Context, store *postgres.Store) error {
	var births int64
	if err := store.Pool().QueryRow(ctx, store.BirthBinding().SQL(`SELECT count(*) FROM (SELECT 1 FROM {t} LIMIT 1) x`)).Scan(&births); err != nil {
		return err
	}
	if births == 0 {
		a.logger.Info("demo: generating the synthetic world (1,037,724 births over 78 registries)")
		sum, err := world.Generate(ctx, store.Pool(), world.Options{Progress: a.stderr, Logger: a.logger})
		if err != nil {
			return err
		}
		a.logger.Info("demo: world loaded", "births", sum.Births, "elapsed", sum.Elapsed.Round(time.Millisecond))
	}
	res, err := intake.New(store).Backfill(ctx, intake.BackfillOptions{Progress: a.progressFunc("snapshot")})
	if err != nil {
		return err
	}
	a.logger.Info("demo: backfill", "run_id", res.RunID, "births", res.Births, "groups", res.Groups, "rows_written", res.RowsWritten,
		"snapshot", res.SnapshotID, "ruleset", res.RulesetVersion, "elapsed", res.Elapsed.Round(time.Millisecond))
	if res.RulesetStatus == gcos.RulesetDraft {
		act, err := store.ActivateRuleset(ctx, res.RulesetVersion, "DEMO-APPROVAL", "demo-approver")
		if err != nil {
			return err
		}
		a.logger.Info("demo: ruleset activated by demo-approver", "ruleset", act.Version, "approval", "DEMO-APPROVAL")
	}
	loop := events.New(store)
	if err := loop.ActivateVocabulary(ctx, "DEMO-APPROVAL", "demo-approver"); err != nil {
		return err
	}
	if _, ok := gcos.FindPrincipal(a.cfg.Principals, demoOperator); ok {
		if _, err := loop.SubscribeAs(ctx, events.NotificationSelector{Findings: true},
			gcos.Actor{Principal: demoOperator, Name: demoOperator, Via: gcos.ViaDaemon}); err != nil {
			return err
		}
	}
	return nil
}
