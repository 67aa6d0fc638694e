// Package daemon assembles and runs what `gcos up` runs: the intake stage's worker (with its silent-gap monitor),
// the scan stage's scheduler, the gate's verdict view, the promotion of captured event signals, the API and
// dashboard, and (demo) churn.
// cmd/gcos, the end-to-end tests, the benchmark and the differential test all start it, so the wiring exists once.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"gcos"
	"gcos/events"
	"gcos/gate"
	"gcos/httpapi"
	"gcos/intake"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/preview"
	"gcos/scan"
	"gcos/world"
)

// Config says what a Daemon runs. Only Store is required; the stages take their settings from its configuration.
type Config struct {
	Store   *postgres.Store
	Logger  *slog.Logger // nil discards
	Version string       // shown by the API
	// Listener serves the API and the dashboard; nil runs no API (tests and benchmarks that drive the stages).
	Listener net.Listener
	// Sources are the tables the intake tails; nil: the configured birth source and the change ledger.
	Sources []postgres.TailSource
	// ScanModes selects the scan loops (postgres.ModeEvent, ModeIncremental, ModeFullAudit); nil: all three.
	ScanModes []string
	// NoPromotion leaves the promotion of captured signals to another process.
	NoPromotion bool
	// Churn, when set, writes a live synthetic workload beside the daemon (gcos up --demo).
	Churn *world.Churn
	// SettleIdle is how long the full audit waits for tails that do not move before it concludes that no intake
	// runs (0: defaultSettleIdle). It applies only while this process does not run the intake (a test or a benchmark stepping
	// the stages): a running intake that does not move is behind, not absent.
	SettleIdle time.Duration
}

// defaultSettleIdle is Config.SettleIdle's default: long enough for a busy intake in another process to move.
const defaultSettleIdle = 10 * time.Second

// Daemon is one process's GCOS: each part is exported so that a test or a benchmark can step it (Intake.Once,
// Scan.Once) instead of running it.
type Daemon struct {
	Store  *postgres.Store
	Intake *intake.Worker
	Scan   *scan.Scheduler
	// Events promotes captured signals under the emission discipline, and answers the findings and notifications
	// routes.
	Events *events.Loop
	// Gate is the production gate, re-scanning through Scan; it answers from its verdict view (Gate.View, nil when
	// gate.view is off) while the view is within gate.max_staleness.
	Gate *gate.Gate
	API  *http.Server // nil without a Listener
	// Logins are the dashboard's login links and sessions (LoginLink mints one); nil without a Listener.
	Logins *httpapi.Logins

	cfg    Config
	logger *slog.Logger
}

// New assembles a daemon over cfg.Store.
func New(cfg Config) (*Daemon, error) {
	if cfg.Store == nil {
		return nil, gcos.Errorf(gcos.EINVALID, "daemon: no store")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	conf := cfg.Store.Config()
	stage := intake.New(cfg.Store)
	worker := &intake.Worker{Stage: stage, Config: conf.Intake, Sources: cfg.Sources, Logger: logger}
	// The full audit and its proof take their cut once the intake has handed off what their instant saw. While this
	// process runs the intake, a wait that runs out means it is behind (under load, or stalled): the proof is then
	// inconclusive (oracle.ErrBehind), not a list of mismatches; with no intake running here, rows that wait may
	// never be handed off, and the proof fails closed.
	settle := func(ctx context.Context, at time.Time) error {
		if !worker.Running() {
			return stage.HandedOff(ctx, cfg.Sources, at, conf.Scan.SettleTimeout.Duration(), cmp.Or(cfg.SettleIdle, defaultSettleIdle))
		}
		if err := stage.HandedOff(ctx, cfg.Sources, at, conf.Scan.SettleTimeout.Duration(), 0); err != nil {
			return fmt.Errorf("%w: %w", oracle.ErrBehind, err)
		}
		return nil
	}
	// The full audit reports the gate's invariant read, and the gate re-scans a stale high-risk group synchronously
	// through the scan stage (SPEC §12): each gets the other's function.
	var g *gate.Gate
	ledger := func(ctx context.Context, scope string) (gcos.LedgerReport, error) { return g.Invariant(ctx, scope) }
	scans := scan.New(cfg.Store, scan.WithSettle(settle), scan.WithLedger(ledger))
	// A question asked with a consistency token waits for the intake to hand off the source writes before it.
	g = gate.New(cfg.Store, scans.RescanGroups, gate.WithHandOff(stage.Present))
	d := &Daemon{
		Store:  cfg.Store,
		Intake: worker,
		Scan:   &scan.Scheduler{Stage: scans, Config: conf.Scan, Logger: logger, Modes: cfg.ScanModes},
		Events: events.New(cfg.Store, events.WithLogger(logger)),
		Gate:   g,
		cfg:    cfg,
		logger: logger,
	}
	if cfg.Listener != nil {
		ready := httpapi.ReadyCheck{Name: "intake", Check: func(context.Context) error { return d.Intake.Ready() }}
		d.Logins = httpapi.NewLogins(conf.HTTP.LoginLinkTTL.Duration(), conf.HTTP.SessionTTL.Duration())
		srv, err := httpapi.NewServer(httpapi.Config{Store: cfg.Store, Gate: g, Events: d.Events, Intake: stage, HTTP: conf.HTTP, Logger: logger,
			Version: cfg.Version, Ready: []httpapi.ReadyCheck{ready}, Logins: d.Logins})
		if err != nil {
			return nil, err
		}
		d.API = srv
	}
	return d, nil
}

// Run runs every part until ctx ends (a clean stop: nil) or one of them fails, which stops the others and is
// returned. The intake's preconditions are checked before anything else starts.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := d.Intake.Start(ctx); err != nil {
		if d.cfg.Listener != nil {
			_ = d.cfg.Listener.Close()
		}
		return err
	}
	if where, listening := d.Store.Sessions(); listening {
		d.logger.Info("database", "pooling", d.Store.Config().Database.Pooling, "session_work", where)
	} else {
		d.logger.Warn("database", "pooling", d.Store.Config().Database.Pooling, "session_work", where)
	}
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
	run("gate", d.Gate.Run)
	run("intake", d.Intake.Run)
	run("rulesets", d.proposeRulesets)
	run("scan", d.Scan.Run)
	if !d.cfg.NoPromotion {
		run("events", d.Events.Run)
	}
	if d.cfg.Churn != nil {
		run("demo churn", d.cfg.Churn.Run)
	}
	if d.API != nil {
		run("http", func(ctx context.Context) error { return serve(ctx, d.API, d.cfg.Listener) })
		insecure := d.Store.Config().HTTP.InsecureNoAuth
		d.logger.Info("gcos up", "listen", "http://"+d.cfg.Listener.Addr().String(), "demo", d.cfg.Churn != nil, "auth", !insecure)
		if insecure {
			d.logger.Warn("authentication is OFF (--insecure-no-auth): any local user or process can call every endpoint, activate a ruleset included")
		} else if link, exp, err := d.LoginLink(); err != nil {
			d.logger.Warn("dashboard login link", "err", err)
		} else {
			d.logger.Info("open the dashboard with this login link (it works once; `gcos login` mints another)", "url", link,
				"expires", exp.UTC().Format(time.RFC3339))
		}
	}
	<-ctx.Done()
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	d.logger.Info("gcos stopped")
	return errors.Join(all...)
}

// LoginLink mints a one-time dashboard login link acting as the daemon's local caller (every role, as the run
// token in the data dir), on the URL a browser on this machine reaches the API at.
func (d *Daemon) LoginLink() (string, time.Time, error) {
	if d.Logins == nil {
		return "", time.Time{}, gcos.Errorf(gcos.EINVALID, "this daemon serves no API")
	}
	return d.Logins.LocalLink(LocalURL(d.cfg.Listener.Addr()))
}

// ruleChanges are the change kinds after which the registries a ruleset hashes may have moved.
var ruleChanges = []gcos.ChangeKind{gcos.ChangePolicy, gcos.ChangeRuleset}

// proposeRulesets computes the draft ruleset of the registries as they are, with the preview of activating it in
// its ruleset.proposed announcement, as soon as the intake has handed off a rule change (policy_changed,
// ruleset_changed), instead of at the next full audit; and once at start, so a change handed off before a restart
// is proposed too. Computing is idempotent: a draft that exists already is neither recorded nor announced again,
// whichever process computed it. A failed proposal is logged and tried again at the next rule change or audit.
func (d *Daemon) proposeRulesets(ctx context.Context) error {
	impact := preview.New(d.Store).RulesetImpact
	by := gcos.NamedActor(gcos.SystemProposer, gcos.ViaDaemon)
	seen := -1
	tick := time.NewTicker(cmp.Or(d.Store.Config().Intake.PollInterval.Duration(), time.Second))
	defer tick.Stop()
	for {
		kinds := d.Intake.Stage.HandoffTotals().Kinds
		n := 0
		for _, k := range ruleChanges {
			n += kinds[string(k)]
		}
		if n != seen {
			seen = n
			rs, created, err := d.Store.ComputeRulesetAs(ctx, by, impact)
			switch {
			case err != nil && ctx.Err() == nil:
				d.logger.Warn("propose ruleset", "err", err)
			case created:
				d.logger.Info("ruleset proposed", "version", rs.Version, "rule_changes", n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// serve answers on ln until ctx ends, then shuts the server down, letting requests in flight finish.
func serve(ctx context.Context, srv *http.Server, ln net.Listener) error {
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
