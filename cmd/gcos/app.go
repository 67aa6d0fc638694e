package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"gcos"
	"gcos/embeddedpg"
	"gcos/postgres"
)

// app holds what every command shares: global flags, configuration, logger and (once opened) the store.
type app struct {
	stdout, stderr io.Writer
	stdin          io.Reader // nil: the process's

	databaseURL string
	sessionURL  string // a direct URL for session work when databaseURL is a transaction pooler
	replicaURL  string // a streaming replica the gate may read through from
	dataDir     string
	configPath  string
	jsonOut     bool
	logLevel    string
	verbose     bool

	cfg     gcos.Config
	secrets []string // redacted from every line the process writes (database password, API tokens)
	logger  *slog.Logger
	store   *postgres.Store
	cluster *embeddedpg.Cluster
	api     *apiClient // the running daemon's API, once found (daemonAPI)
}

func newApp(stdout, stderr io.Writer) *app {
	return &app{stdout: stdout, stderr: stderr}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "gcos",
		Short:         "GCOS keeps fail-closed, decaying governance verdicts per group of born objects",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if err := checkInput(cmd, args); err != nil {
				return err
			}
			return a.setup()
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return gcos.Errorf(gcos.EINVALID, "%v", err) // exit 2 like any other bad input
	})
	f := root.PersistentFlags()
	// The URL's default is read from the environment in setup, not here: a flag's default is printed by --help,
	// and this one carries a password.
	f.StringVar(&a.databaseURL, "database-url", "", "PostgreSQL URL (env GCOS_DATABASE_URL); empty starts the embedded cluster in --data-dir")
	f.StringVar(&a.replicaURL, "replica-database-url", "", "streaming replica the gate reads through from while it is within gate.max_staleness of the primary (env GCOS_REPLICA_DATABASE_URL)")
	f.StringVar(&a.sessionURL, "session-database-url", "", "direct PostgreSQL URL for session work (LISTEN) when --database-url is a transaction pooler (env GCOS_SESSION_DATABASE_URL)")
	f.StringVar(&a.dataDir, "data-dir", envOr("GCOS_DATA_DIR", "./.gcos"), "data directory of the embedded PostgreSQL (env GCOS_DATA_DIR)")
	f.StringVar(&a.configPath, "config", os.Getenv("GCOS_CONFIG"), "configuration file, JSON (env GCOS_CONFIG)")
	f.BoolVar(&a.jsonOut, "json", false, "machine-readable JSON output")
	f.StringVar(&a.logLevel, "log-level", envOr("GCOS_LOG_LEVEL", "info"), "log level: debug, info, warn, error")
	f.BoolVarP(&a.verbose, "verbose", "v", false, "say how the command reaches GCOS: the running daemon's API or the database")
	// Every command, in one place; each lives in the file named after it.
	root.AddCommand(
		// the daemon
		a.upCommand(),
		// the database and the synthetic world
		a.migrateCommand(), a.worldCommand(),
		// the intake stage
		a.backfillCommand(), a.intakeCommand(), a.cursorCommand(),
		// the scan stage and the audit's proof
		a.scanCommand(), a.verifyCommand(),
		// what qualifies a verdict
		a.snapshotCommand(), a.rulesetCommand(),
		// the gate's reads
		a.gateCommand(), a.explainCommand(), a.invariantCommand(), a.previewCommand(),
		// the operator's reads and the event domain
		a.findingsCommand(), a.notificationsCommand(), a.statusCommand(), a.eventsCommand(), a.changesCommand(), a.loginCommand(),
	)
	argsAreInput(root)
	return root
}

// argsAreInput makes every command's argument check a usage error (exit 2), as a flag error is: cobra's own
// checks return plain errors, and a parent given an unknown subcommand would otherwise exit 1.
func argsAreInput(cmd *cobra.Command) {
	check := cmd.Args
	switch {
	case check == nil && cmd.HasSubCommands():
		check = func(c *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q (see %s --help)", args[0], c.CommandPath(), c.CommandPath())
			}
			return nil
		}
	case check == nil:
		check = cobra.NoArgs
	}
	cmd.Args = func(c *cobra.Command, args []string) error {
		if err := check(c, args); err != nil {
			if gcos.ErrorCode(err) == gcos.EINVALID {
				return err
			}
			return gcos.Errorf(gcos.EINVALID, "%v", err)
		}
		return nil
	}
	if !cmd.Runnable() && cmd.HasSubCommands() {
		// cobra answers a parent with no Run by printing its help before checking its arguments: run the check.
		cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
	}
	for _, sub := range cmd.Commands() {
		argsAreInput(sub)
	}
}

func (a *app) execute(ctx context.Context, args []string) (code int) {
	defer func() {
		// A panic's value and stack can carry a connection string or a token: print them redacted.
		if r := recover(); r != nil {
			a.close()
			fmt.Fprintf(a.stderr, "gcos: panic: %s\n%s", a.redact(fmt.Sprint(r)), a.redact(string(debug.Stack())))
			code = 2
		}
	}()
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	a.close()
	if err == nil {
		return 0
	}
	var ee *exitError
	if !errors.As(err, &ee) && cmd != nil && cmd.Name() == gateCommandName {
		return a.gateFailed(cmd, args, err) // whatever went wrong, the gate's answer is a block
	}
	if errors.As(err, &ee) {
		if ee.err != nil {
			a.reportError(ee.err)
		}
		return ee.code
	}
	a.reportError(err)
	switch gcos.ErrorCode(err) {
	case gcos.EINVALID, gcos.ENOTFOUND, gcos.EGONE, gcos.EFORBIDDEN, gcos.EUNAUTHORIZED, gcos.EMETHOD:
		return exitUsage
	}
	return 1
}

// exitUsage is the exit status of bad input: a refused flag, argument or configuration value, a thing named that
// does not exist, or acting without the role it needs. Nothing was changed.
const exitUsage = 2

// checkInput refuses, before anything runs, a flag value or argument that gcos.CheckParam refuses: the same
// rule, and the same message, as the HTTP API's 400.
func checkInput(cmd *cobra.Command, args []string) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if err == nil {
			err = gcos.CheckParam(f.Name, f.Value.String())
		}
		if err == nil {
			err = checkRange(f)
		}
	})
	for i, arg := range args {
		if err == nil {
			err = gcos.CheckParam(fmt.Sprintf("argument %d", i+1), arg)
		}
	}
	return err
}

// rangeAnnotation holds a numeric flag's bounds (set with flagRange); every numeric flag has one (TestNumericFlags).
const rangeAnnotation = "gcos_range"

// flagRange bounds a numeric flag to lo..hi (a duration's in seconds); checkInput refuses a value outside with exit 2.
func flagRange(fs *pflag.FlagSet, name string, lo, hi float64) {
	if err := fs.SetAnnotation(name, rangeAnnotation, []string{strconv.FormatFloat(lo, 'g', -1, 64), strconv.FormatFloat(hi, 'g', -1, 64)}); err != nil {
		panic(err) // a flag named wrong in the code
	}
}

// checkRange refuses a numeric flag's value outside its flagRange.
func checkRange(f *pflag.Flag) error {
	bounds := f.Annotations[rangeAnnotation]
	if len(bounds) != 2 {
		return nil
	}
	lo, _ := strconv.ParseFloat(bounds[0], 64)
	hi, _ := strconv.ParseFloat(bounds[1], 64)
	var v float64
	var err error
	if f.Value.Type() == "duration" {
		var d time.Duration
		d, err = time.ParseDuration(f.Value.String())
		v = d.Seconds()
	} else {
		v, err = strconv.ParseFloat(f.Value.String(), 64)
	}
	if err != nil || math.IsNaN(v) || v < lo || v > hi {
		unit := ""
		if f.Value.Type() == "duration" {
			unit = " seconds"
		}
		return gcos.Errorf(gcos.EINVALID, "--%s %s: want %s..%s%s", f.Name, f.Value.String(), bounds[0], bounds[1], unit)
	}
	return nil
}

func (a *app) reportError(err error) {
	msg := a.redact(err.Error())
	if a.jsonOut {
		_ = json.NewEncoder(a.stdout).Encode(map[string]any{"error": map[string]string{"code": gcos.ErrorCode(err), "message": msg}})
		return
	}
	fmt.Fprintln(a.stderr, "gcos:", msg)
}

// redact hides the process's secrets and any connection string's password in s.
func (a *app) redact(s string) string { return gcos.Redact(s, a.secrets...) }

// redactingHandler redacts each record's message (the attributes go through redactAttr): a message is not always
// a constant, e.g. net/http's error log writes a recovered panic as one.
type redactingHandler struct {
	slog.Handler
	redact func(string) string
}

func (h redactingHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.redact(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool { out.AddAttrs(a); return true })
	return h.Handler.Handle(ctx, out)
}

func (h redactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return redactingHandler{h.Handler.WithAttrs(attrs), h.redact}
}

func (h redactingHandler) WithGroup(name string) slog.Handler {
	return redactingHandler{h.Handler.WithGroup(name), h.redact}
}

// redactAttr is the logger's ReplaceAttr: every string and error value is redacted before it is written.
func (a *app) redactAttr(_ []string, attr slog.Attr) slog.Attr {
	switch v := attr.Value; v.Kind() {
	case slog.KindString:
		attr.Value = slog.StringValue(a.redact(v.String()))
	case slog.KindAny:
		if err, ok := v.Any().(error); ok {
			attr.Value = slog.StringValue(a.redact(err.Error()))
		}
	}
	return attr
}

func (a *app) setup() error {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(a.logLevel)); err != nil {
		return gcos.Errorf(gcos.EINVALID, "--log-level: %s is not one of debug, info, warn, error", gcos.Quote(a.logLevel))
	}
	if a.databaseURL == "" {
		a.databaseURL = os.Getenv("GCOS_DATABASE_URL")
	}
	if a.sessionURL == "" {
		a.sessionURL = os.Getenv("GCOS_SESSION_DATABASE_URL")
	}
	if a.replicaURL == "" {
		a.replicaURL = os.Getenv("GCOS_REPLICA_DATABASE_URL")
	}
	a.secrets = append(append(gcos.URLSecrets(a.databaseURL), gcos.URLSecrets(a.sessionURL)...), gcos.URLSecrets(a.replicaURL)...)
	a.logger = slog.New(redactingHandler{slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: lvl, ReplaceAttr: a.redactAttr}), a.redact})
	cfg, err := gcos.LoadConfig(a.configPath)
	if err != nil {
		return err
	}
	cfg.ApplyEnv(os.Getenv)
	a.secrets = append(append(a.secrets, cfg.HTTP.ReaderTokens...), cfg.HTTP.OperatorTokens...)
	for _, p := range cfg.Principals {
		a.secrets = append(a.secrets, p.Tokens...)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	a.cfg = cfg
	return nil
}

// open connects to the configured database, starting the embedded cluster when no URL is given.
func (a *app) open(ctx context.Context) (*postgres.Store, error) {
	if a.store != nil {
		return a.store, nil
	}
	dsn := a.databaseURL
	if dsn == "" {
		dir, err := filepath.Abs(a.dataDir)
		if err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
		cluster, err := embeddedpg.Start(ctx, embeddedpg.Config{DataDir: dir, Logger: a.logger})
		var inUse *embeddedpg.InUseError
		switch {
		case errors.As(err, &inUse):
			// A daemon (or another command) runs the data dir's cluster: use that server, leave it running.
			if dsn, err = embeddedpg.RunningDSN(dir); err != nil {
				return nil, fmt.Errorf("embedded PostgreSQL: %w (%w)", inUse, err)
			}
			a.secrets = append(a.secrets, gcos.URLSecrets(dsn)...)
			a.verbosef("through the database of the embedded cluster in %s, run by pid %d", dir, inUse.PID)
		case err != nil:
			return nil, fmt.Errorf("embedded PostgreSQL: %w", err)
		default:
			a.cluster = cluster
			dsn = cluster.DSN()
			a.verbosef("through the database of the embedded cluster in %s, started for this command", dir)
		}
	} else {
		a.verbosef("through the database at %s", databaseIdentity(dsn))
	}
	store, err := postgres.Open(ctx, postgres.Databases{URL: dsn, SessionURL: a.sessionURL, ReplicaURL: a.replicaURL}, a.cfg, a.logger)
	if err != nil {
		return nil, err
	}
	a.store = store
	return store, nil
}

// openPrepared opens the store and makes sure the substrate verifies and GCOS's schema is current.
func (a *app) openPrepared(ctx context.Context, createSubstrate bool) (*postgres.Store, error) {
	store, err := a.open(ctx)
	if err != nil {
		return nil, err
	}
	if _, err := store.Prepare(ctx, postgres.PrepareOptions{CreateSubstrate: createSubstrate}); err != nil {
		return nil, err
	}
	return store, nil
}

// storeRunE is the one shape of a command that reads or acts on the store: open it prepared, run do, and print the
// result as JSON (--json) or as text(result). A command checks its flags before anything opens, in its Args
// (argsAnd), so bad input costs no connection and changes nothing.
func storeRunE[T any](a *app, do func(ctx context.Context, store *postgres.Store, args []string) (T, error), text func(T) string) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		store, err := a.openPrepared(cmd.Context(), false)
		if err != nil {
			return err
		}
		res, err := do(cmd.Context(), store, args)
		if err != nil {
			return err
		}
		return a.print(res, text(res))
	}
}

// argsAnd is a positional-argument rule followed by a check of the flags; cobra runs both before RunE.
func argsAnd(rule cobra.PositionalArgs, check func(args []string) error) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := rule(cmd, args); err != nil {
			return err
		}
		return check(args)
	}
}

func (a *app) close() {
	if a.store != nil {
		a.store.Close()
		a.store = nil
	}
	if a.cluster != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := a.cluster.Stop(ctx); err != nil {
			a.logger.Error("stop embedded PostgreSQL", "err", err)
		}
		a.cluster = nil
	}
}

// print writes v as JSON with --json, else the human text.
func (a *app) print(v any, human string) error {
	if a.jsonOut {
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	if !strings.HasSuffix(human, "\n") {
		human += "\n"
	}
	_, err := io.WriteString(a.stdout, human)
	return err
}
