package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"gcos"
	"gcos/httpapi"
	"gcos/intake"
	"gcos/postgres"
	"gcos/scan"
	"gcos/world"
)

// version is stamped by the build (-ldflags "-X main.version=...").
var version = "dev"

func (a *app) upCommand() *cobra.Command {
	var demo, insecure bool
	var listen string
	var birthsPerSecond, changesPerSecond float64
	cmd := &cobra.Command{
		Use:   "up",
		Short: "run the daemon: intake, scans, gate API and dashboard (--demo: embedded world, live churn)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if listen != "" {
				a.cfg.HTTP.Listen = listen
			}
			if insecure {
				a.cfg.HTTP.InsecureNoAuth = true
			}
			noTokens := len(a.cfg.HTTP.ReaderTokens)+len(a.cfg.HTTP.OperatorTokens) == 0
			if err := httpapi.CheckListen(a.cfg.HTTP); err != nil {
				return err // before anything starts: a wrong address must not cost a world generation first
			}
			if demo && noTokens {
				// The demo runs on loopback (CheckListen refused anything else without tokens) so an evaluator can
				// open the dashboard at once.
				a.cfg.HTTP.InsecureNoAuth = true
			}
			store, err := a.openWhenReachable(ctx, demo)
			if err != nil || store == nil {
				return err // nil store: stopped while waiting for the database
			}
			if demo {
				if err := a.demoWorld(ctx, store); err != nil {
					return err
				}
			}
			return a.serve(ctx, store, demo, birthsPerSecond, changesPerSecond)
		},
	}
	cmd.Flags().BoolVar(&demo, "demo", false, "embedded demo: greenfield substrate, synthetic world, backfill, live churn")
	cmd.Flags().StringVar(&listen, "listen", "", "listen address (default from config, 127.0.0.1:8080)")
	cmd.Flags().BoolVar(&insecure, "insecure-no-auth", false, "serve without tokens (loopback only)")
	cmd.Flags().Float64Var(&birthsPerSecond, "demo-births-per-second", 50, "demo churn: new births per second")
	cmd.Flags().Float64Var(&changesPerSecond, "demo-changes-per-second", 5, "demo churn: registry changes per second")
	return cmd
}

// openWhenReachable is openPrepared that waits out a database it cannot reach yet (a daemon started before its
// database, or during a restart): it retries with back-off and logs once per state change. Any other error, and
// a failure to start the embedded cluster, ends it. It returns a nil store if ctx ends while it waits.
func (a *app) openWhenReachable(ctx context.Context, demo bool) (*postgres.Store, error) {
	outage := gcos.NewOutageLog("connect to the database", 250*time.Millisecond, a.cfg.Outage, a.logger)
	for {
		store, err := a.openPrepared(ctx, demo)
		if err == nil {
			outage.Succeeded()
			return store, nil
		}
		if a.databaseURL == "" || !unreachable(err) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return nil, nil
			}
			return nil, err
		}
		t := time.NewTimer(outage.Failed(err))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil
		case <-t.C:
		}
	}
}

// unreachable reports whether err says the database cannot be reached (yet), not that it refused something.
func unreachable(err error) bool {
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return gcos.ErrorCode(err) == gcos.EUNAVAILABLE || errors.As(err, &connErr) || errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, io.ErrUnexpectedEOF)
}

// demoWorld loads the synthetic world into an empty database, seeds it and activates its ruleset as a demo
// approver (never the proposer), and registers and activates the governance event vocabulary.
func (a *app) demoWorld(ctx context.Context, store *postgres.Store) error {
	var births int64
	if err := store.Pool().QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM birth_registry LIMIT 1) x`).Scan(&births); err != nil {
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
	if _, err := store.RegisterVocabulary(ctx); err != nil {
		return err
	}
	types, err := store.ListEventTypes(ctx)
	if err != nil {
		return err
	}
	for _, t := range types {
		if !t.Active {
			if _, err := store.ActivateEventType(ctx, t.EventType, "DEMO-APPROVAL", "demo-approver"); err != nil {
				return err
			}
		}
	}
	return nil
}

// serve runs intake, scans, event promotion, the API and (demo) churn until ctx ends.
func (a *app) serve(ctx context.Context, store *postgres.Store, demo bool, birthsPerSecond, changesPerSecond float64) error {
	w := a.intakeWorker(store)
	intakeReady := httpapi.ReadyCheck{Name: "intake", Check: func(context.Context) error { return w.Ready() }}
	srv, err := httpapi.NewServer(httpapi.Config{Store: store, HTTP: a.cfg.HTTP, Logger: a.logger, Version: version,
		Ready: []httpapi.ReadyCheck{intakeReady}})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.HTTP.Listen, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	run := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				cancel()
			}
		}()
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	run("intake", w.Run)
	run("scan", (&scan.Scheduler{Stage: scan.New(store), Config: a.cfg.Scan, Logger: a.logger}).Run)
	run("events", func(ctx context.Context) error { return a.promoteLoop(ctx, store) })
	if demo {
		churn := &world.Churn{Pool: store.Pool(), BirthsPerSecond: birthsPerSecond, ChangesPerSecond: changesPerSecond, Seed: uint64(time.Now().UnixNano()), Logger: a.logger, Outage: a.cfg.Outage}
		run("demo churn", churn.Run)
	}
	run("http", func(ctx context.Context) error {
		go func() {
			<-ctx.Done()
			shutdown, c := context.WithTimeout(context.Background(), 10*time.Second)
			defer c()
			_ = srv.Shutdown(shutdown)
		}()
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	})
	a.logger.Info("gcos up", "listen", "http://"+ln.Addr().String(), "demo", demo, "auth", !a.cfg.HTTP.InsecureNoAuth)
	<-ctx.Done()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	a.logger.Info("gcos stopped")
	return errors.Join(all...)
}

// promoteLoop moves captured signals whose type became active to the outbox, in order, in whichever process holds
// the promotion role.
func (a *app) promoteLoop(ctx context.Context, store *postgres.Store) error {
	const every = 2 * time.Second
	outage := gcos.NewOutageLog("promote pending signals", every, a.cfg.Outage, a.logger)
	wait := every
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = every
		// ECONFLICT: another process holds the promotion role.
		if _, err := store.PromotePending(ctx); err != nil && ctx.Err() == nil && gcos.ErrorCode(err) != gcos.ECONFLICT {
			wait = max(every, outage.Failed(err))
		} else if err == nil || gcos.ErrorCode(err) == gcos.ECONFLICT {
			outage.Succeeded()
		}
	}
}
