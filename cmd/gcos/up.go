package main

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/daemon"
	"gcos/httpapi"
	"gcos/postgres"
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
		if a.databaseURL == "" || !postgres.Unreachable(err) || ctx.Err() != nil {
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

// serve runs the daemon (and, demo, its churn) until ctx ends.
func (a *app) serve(ctx context.Context, store *postgres.Store, demo bool, birthsPerSecond, changesPerSecond float64) error {
	ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", a.cfg.HTTP.Listen, err)
	}
	cfg := daemon.Config{Store: store, Logger: a.logger, Version: version, Listener: ln}
	if demo {
		cfg.Churn = &world.Churn{Pool: store.Pool(), BirthsPerSecond: birthsPerSecond, ChangesPerSecond: changesPerSecond,
			Seed: uint64(time.Now().UnixNano()), Logger: a.logger, Outage: a.cfg.Outage}
	}
	d, err := daemon.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	return d.Run(ctx)
}
