package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
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
	var churn demoChurn
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
			if err := httpapi.CheckListen(a.cfg.HTTP, a.cfg.Principals); err != nil {
				return err // before anything starts: a wrong address must not cost a world generation first
			}
			// The data dir and the port are claimed before anything is read or written: a second `gcos up` on the
			// same data dir (or port) exits 1 naming the first, having changed nothing.
			dir, err := filepath.Abs(a.dataDir)
			if err != nil {
				return fmt.Errorf("data dir: %w", err)
			}
			release, err := daemon.Claim(dir)
			if err != nil {
				return err
			}
			defer release()
			ln, err := net.Listen("tcp", a.cfg.HTTP.Listen)
			if err != nil {
				return fmt.Errorf("listen %s: %w (is another gcos daemon serving it?)", a.cfg.HTTP.Listen, err)
			}
			defer ln.Close()
			// A token made for this run, published in the data dir (api.token, 0600) with the API's URL: commands
			// run beside the daemon ask it with this token (reach.go).
			runToken, err := daemon.NewRunToken()
			if err != nil {
				return err
			}
			a.cfg.HTTP.LocalTokens = append(a.cfg.HTTP.LocalTokens, runToken)
			a.secrets = append(a.secrets, runToken)
			if demo && a.cfg.Scan.FullAuditInterval == gcos.DefaultConfig().Scan.FullAuditInterval {
				// The demo proves its state within minutes, not once a day (a configured interval wins).
				a.cfg.Scan.FullAuditInterval = gcos.Duration(churn.auditEvery)
			}
			if demo && len(a.cfg.Principals) == 0 {
				// The demo's proposer, approver and operator are its principals, so ruleset ownership and roles are
				// checked (a configured list wins). demo-operator is subscribed to the findings' announcements.
				a.cfg.Principals = []gcos.Principal{{Name: "demo-proposer", Roles: []string{gcos.RoleOperator}},
					{Name: "demo-approver", Roles: []string{gcos.RoleApprover}},
					{Name: demoOperator, Roles: []string{gcos.RoleReader, gcos.RoleOperator}}}
			}
			if len(a.cfg.Principals) == 0 {
				a.logger.Warn("no principals configured: ruleset ownership is not checked (ruleset_unowned is never raised)")
			}
			if limit, from := daemon.LimitMemory(a.cfg.Process); from != "none" {
				a.logger.Info("soft memory limit", "mib", limit>>20, "from", from)
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
			return a.serve(ctx, store, ln, dir, demo, runToken, churn)
		},
	}
	cmd.Flags().BoolVar(&demo, "demo", false, "embedded demo: greenfield substrate, synthetic world, backfill, live churn")
	cmd.Flags().StringVar(&listen, "listen", "", "listen address (default from config, 127.0.0.1:8080)")
	cmd.Flags().BoolVar(&insecure, "insecure-no-auth", false, "serve without tokens (loopback only)")
	cmd.Flags().Float64Var(&churn.births, "demo-births-per-second", 50, "demo churn: new births per second")
	cmd.Flags().Float64Var(&churn.changes, "demo-changes-per-second", 5, "demo churn: registry changes per second")
	cmd.Flags().Float64Var(&churn.governance, "demo-governance-per-second", 0.5, "demo churn: governance edits per second (lifecycle, coverage, ownership, exceptions, untrusted rows)")
	cmd.Flags().DurationVar(&churn.proposeEvery, "demo-propose-every", 3*time.Minute, "demo churn: edit the rule registries and propose a draft ruleset this often (0: never)")
	cmd.Flags().DurationVar(&churn.auditEvery, "demo-audit-every", 2*time.Minute, "demo: the full audit's interval unless the configuration sets scan.full_audit_interval")
	flagRange(cmd.Flags(), "demo-births-per-second", 0, 100_000)
	flagRange(cmd.Flags(), "demo-changes-per-second", 0, 100_000)
	flagRange(cmd.Flags(), "demo-governance-per-second", 0, 1000)
	flagRange(cmd.Flags(), "demo-propose-every", 0, 86400)
	flagRange(cmd.Flags(), "demo-audit-every", 1, 86400)
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

// demoChurn is what the demo's churn writes (the --demo-* flags).
type demoChurn struct {
	births, changes, governance float64
	proposeEvery, auditEvery    time.Duration
}

// serve runs the daemon (and, demo, its churn) on ln until ctx ends, published in dir.
func (a *app) serve(ctx context.Context, store *postgres.Store, ln net.Listener, dir string, demo bool, runToken string, churn demoChurn) error {
	unpublish, err := daemon.Publish(dir, daemon.Running{URL: daemon.LocalURL(ln.Addr()), PID: os.Getpid(),
		Database: databaseIdentity(a.databaseURL), StartedAt: time.Now().UTC(), Version: version}, runToken)
	if err != nil {
		ln.Close()
		return err
	}
	defer unpublish()
	cfg := daemon.Config{Store: store, Logger: a.logger, Version: version, Listener: ln}
	if demo {
		cfg.Churn = &world.Churn{Pool: store.Pool(), BirthsPerSecond: churn.births, ChangesPerSecond: churn.changes,
			GovernancePerSecond: churn.governance, ProposeEvery: churn.proposeEvery,
			Propose: func(ctx context.Context) (string, error) {
				rs, _, err := store.ComputeRuleset(ctx, "demo-proposer")
				return rs.Version, err
			},
			Seed: uint64(time.Now().UnixNano()), Logger: a.logger, Outage: a.cfg.Outage}
	}
	d, err := daemon.New(cfg)
	if err != nil {
		ln.Close()
		return err
	}
	return d.Run(ctx)
}
