package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"gcos/world"
)

// options are the command's flags.
type options struct {
	databaseURL    string
	births         int
	reps           int
	only           []string
	json           bool
	scale10m       bool
	children       int
	timeout        time.Duration
	maxLoad        float64
	latencyChanges int
	logRows        int
	loadRate       float64
	gateDuration   time.Duration
	cpuProfile     string
	memProfile     string
	coalesceWindow time.Duration
	intakePoll     time.Duration
	intakePage     int
	catchUpPage    int // intake.catch_up_page_size; -1: none
	memoryLimit    int // process.memory_limit_mib; -1: none
	noReadAhead    bool
	poolConns      int
	verbose        bool
	memoryChild    string // internal: run the memory workload in this process and print its RSS
}

// benchmark is one named benchmark.
type benchmark struct {
	name string
	desc string
	run  func(ctx context.Context, b *runner) ([]row, error)
}

var benchmarks = []benchmark{
	{"snapshot", "source snapshot of the world: CaptureSnapshot vs the seeds' md5(string_agg) per group", benchSnapshot},
	{"backfill", "backfill (snapshot + ruleset + seeding) vs one evaluated candidate row per birth", benchBackfill},
	{"children", "+N inherited children under one container: candidate rows added, groups dirtied", benchChildren},
	{"intake", "PollTail + ApplyHandoff over every birth vs a plain keyset tail", benchIntake},
	{"latency", "change → fresh verdict in event mode (a birth's membership refresh, and an object change that may move a verdict), idle and under 5,000 births/s", benchLatency},
	{"rescan", "one dirty group rescan at N vs 10N births", benchRescan},
	{"gate", "gate decisions in-process, from the database and from the view (8 concurrent callers); over HTTP: gate_http", benchGate},
	{"gate_http", "the gate as a pipeline asks it: over HTTP through the client package, single and batch of 100, view and database, bytes per answer, beside in-process and the naive gate", benchGateHTTP},
	{"gate_churn", "high-risk objects allowed at rest, asked while births (and sibling updates) arrive in their groups at 5,000/s: blocks vs no view and no re-scan", benchGateChurn},
	{"gate_readers", "the gate over HTTP idle and beside 40 /v1/invariant readers (own pool, cached reads) vs one shared pool", benchGateReaders},
	{"gate_replica", "the gate reading through from a streaming replica (within gate.max_staleness) vs the primary, under 5,000 births/s, and the replica's lag", benchGateReplica},
	{"preview", "impact preview of an owner revocation covering 10 % of a scope vs re-evaluating every group", benchPreview},
	{"verify", "the reference evaluator (gcos verify) from scratch, beside the full audit it checks", benchVerify},
	{"memory", "RSS of a gcos-up-equivalent process after intake + scans over the world", benchMemory},
	{"logs", "the verdict change log and the signal keys at 10⁷ rows: retiring an hour of changes (a window of keys) by dropping a partition (truncating a generation) vs DELETE + VACUUM, WAL, writes, the newest page and a page's key claim", benchLogs},
	{"fleet", "1, 2 and 3 gcos up processes on one database under rising churn: sustained births/s with change → verdict p99 ≤ 1 s, gate decisions/s, where the CPU goes", benchFleet},
}

// runner is what a benchmark gets: the options, the server and a logger.
type runner struct {
	opts *options
	env  *env
	log  *slog.Logger
}

// report is the whole run, as -json prints it.
type report struct {
	Command    string        `json:"command"`
	StartedAt  time.Time     `json:"started_at"`
	Host       hostInfo      `json:"host"`
	Births     int           `json:"births"`
	Reps       int           `json:"reps"`
	Benchmarks []benchReport `json:"benchmarks"`
	Rows       []row         `json:"rows"`
}

type hostInfo struct {
	CPUs         int    `json:"cpus"`
	GoVersion    string `json:"go_version"`
	PostgreSQL   string `json:"postgresql"`
	Server       string `json:"server"` // embedded or the given URL's host
	LoadAtStart  string `json:"load_at_start"`
	LoadAtFinish string `json:"load_at_finish"`
}

type benchReport struct {
	Name       string  `json:"name"`
	Elapsed    float64 `json:"elapsed_s"`
	LoadBefore string  `json:"load_before"`
	LoadAfter  string  `json:"load_after"`
	Error      string  `json:"error,omitempty"`
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var only string
	fs.StringVar(&o.databaseURL, "database-url", os.Getenv("GCOS_BENCH_DATABASE_URL"), "admin DSN of a PostgreSQL server to create the benchmark databases on (default: a throwaway embedded cluster)")
	fs.IntVar(&o.births, "births", world.DefaultBirths, "births in each benchmark's world")
	fs.IntVar(&o.reps, "reps", 5, "repetitions per figure (medians are reported)")
	fs.StringVar(&only, "only", "", "comma-separated benchmarks to run (default all): "+names())
	fs.BoolVar(&o.json, "json", false, "print the results as JSON")
	fs.BoolVar(&o.scale10m, "scale10m", false, "also run the 10,000,000-birth backfill (≤ 20 s, linear), the 1M vs 10M rescan and the daemon's peak memory at 10M births")
	fs.IntVar(&o.children, "children", 1_000_000, "inherited children added by the children benchmark")
	fs.DurationVar(&o.timeout, "timeout", time.Hour, "time limit of each benchmark")
	fs.Float64Var(&o.maxLoad, "max-load", 0, "before each benchmark wait (up to 10 min) until the 1-minute load average is below this (0: don't wait)")
	fs.IntVar(&o.latencyChanges, "latency-changes", 200, "changes measured per latency phase (idle, under load)")
	fs.IntVar(&o.logRows, "log-rows", 10_000_000, "changes in the verdict change log of the logs benchmark")
	fs.Float64Var(&o.loadRate, "load-births-per-second", 5000, "churn rate of the latency benchmark's loaded phase")
	fs.DurationVar(&o.gateDuration, "gate-duration", 5*time.Second, "measuring time of each gate figure per repetition")
	fs.DurationVar(&o.coalesceWindow, "coalesce-window", 0, "override scan.coalesce_window (default: gcos.DefaultConfig)")
	fs.DurationVar(&o.intakePoll, "intake-poll", 0, "override intake.poll_interval (default: gcos.DefaultConfig)")
	fs.IntVar(&o.intakePage, "intake-page", 0, "override intake.page_size (default: gcos.DefaultConfig)")
	fs.IntVar(&o.catchUpPage, "catch-up-page", 0, "override intake.catch_up_page_size, the size of a page read ahead (0: gcos.DefaultConfig's; -1: none, intake.page_size throughout)")
	fs.IntVar(&o.memoryLimit, "memory-limit-mib", 0, "override process.memory_limit_mib, the daemon's soft memory limit (0: gcos.DefaultConfig's; -1: none)")
	fs.BoolVar(&o.noReadAhead, "no-read-ahead", false, "set intake.read_ahead to false")
	fs.IntVar(&o.poolConns, "pool-conns", 0, "override database.pool_conns, the connections of the store's pool (0: gcos.DefaultConfig's, as gcos up opens it)")
	fs.BoolVar(&o.verbose, "v", false, "debug logging")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile (allocations of the whole run, and what is live at its end) to this file")
	fs.StringVar(&o.memoryChild, "memory-child", "", "internal: run the memory workload (ours|naive) on -database-url and print the RSS")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	if o.reps < 1 {
		return nil, errors.New("-reps must be at least 1")
	}
	if o.births < world.MinBirths {
		return nil, fmt.Errorf("-births must be at least %d", world.MinBirths)
	}
	if o.children < 1 {
		return nil, errors.New("-children must be positive")
	}
	if o.logRows < 1 {
		return nil, errors.New("-log-rows must be positive")
	}
	if o.latencyChanges < 1 {
		return nil, errors.New("-latency-changes must be positive")
	}
	for _, n := range strings.Split(only, ",") {
		n = strings.TrimSpace(n)
		if n == "" {
			continue
		}
		if !slices.ContainsFunc(benchmarks, func(b benchmark) bool { return b.name == n }) {
			return nil, fmt.Errorf("-only: unknown benchmark %q (have %s)", n, names())
		}
		o.only = append(o.only, n)
	}
	return o, nil
}

func names() string {
	var out []string
	for _, b := range benchmarks {
		out = append(out, b.name)
	}
	return strings.Join(out, ",")
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "bench:", err)
		return 2
	}
	level := slog.LevelInfo
	if o.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(stderr, "bench: cpu profile:", err)
			return 2
		}
		defer func() { pprof.StopCPUProfile(); f.Close() }()
	}
	if o.memProfile != "" {
		defer func() {
			f, err := os.Create(o.memProfile)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				fmt.Fprintln(stderr, "bench: heap profile:", err)
			}
		}()
	}

	// First Ctrl-C (or SIGTERM) cancels the run; cleanup (dropping databases, stopping the cluster) still runs.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		n := 0
		for range sigs {
			n++
			if n == 1 {
				fmt.Fprintln(stderr, "bench: interrupted; cleaning up (databases, cluster)…")
			}
			cancel()
		}
	}()

	if o.memoryChild != "" {
		if err := memoryChild(ctx, o, stdout); err != nil {
			fmt.Fprintln(stderr, "bench: memory child:", err)
			return 1
		}
		return 0
	}

	rep := report{Command: commandLine(args), StartedAt: time.Now().UTC(), Births: o.births, Reps: o.reps}
	rep.Host.CPUs = runtime.NumCPU()
	rep.Host.GoVersion = runtime.Version()
	rep.Host.LoadAtStart = formatLoad(loadAvg())

	e, err := newEnv(ctx, o.databaseURL, log)
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	defer e.close()
	rep.Host.PostgreSQL = fmt.Sprintf("%d.%d", e.serverVer/10000, e.serverVer%10000)
	if e.cluster != nil {
		rep.Host.Server = "embedded (ephemeral: fsync off)"
	} else {
		rep.Host.Server = "given by -database-url"
	}
	r := &runner{opts: o, env: e, log: log}

	failed := false
	for _, b := range benchmarks {
		if len(o.only) > 0 && !slices.Contains(o.only, b.name) {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		waitLoad(ctx, o.maxLoad, log)
		br := benchReport{Name: b.name, LoadBefore: formatLoad(loadAvg())}
		log.Info("benchmark start", "bench", b.name, "what", b.desc, "load", br.LoadBefore)
		t0 := time.Now()
		rows, err := runOne(ctx, b, r)
		br.Elapsed = time.Since(t0).Seconds()
		br.LoadAfter = formatLoad(loadAvg())
		if err != nil {
			failed = true
			br.Error = err.Error()
			log.Error("benchmark failed", "bench", b.name, "err", err)
			rows = append(rows, row{Bench: b.name, Metric: "error", Status: statusError, Note: err.Error()})
		}
		for i := range rows {
			rows[i].finish()
		}
		rep.Rows = append(rep.Rows, rows...)
		rep.Benchmarks = append(rep.Benchmarks, br)
		log.Info("benchmark done", "bench", b.name, "elapsed", time.Duration(br.Elapsed*float64(time.Second)).Round(time.Millisecond), "load", br.LoadAfter)
		if !o.json {
			printTable(stderr, rows) // progress view; the full table goes to stdout at the end
		}
	}
	rep.Host.LoadAtFinish = formatLoad(loadAvg())
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 1
		}
	} else {
		printReport(stdout, rep)
	}
	if ctx.Err() != nil {
		return 130
	}
	if failed {
		return 1
	}
	return 0
}

// runOne runs one benchmark under its time limit and turns a panic into an error, so the others still run and
// cleanup still happens.
func runOne(ctx context.Context, b benchmark, r *runner) (rows []row, err error) {
	ctx, cancel := context.WithTimeout(ctx, r.opts.timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	rows, err = b.run(ctx, r)
	if err != nil && ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("%w (time limit %s, -timeout)", err, r.opts.timeout)
	}
	return rows, err
}

// waitLoad waits until the 1-minute load average is below limit (at most 10 minutes).
func waitLoad(ctx context.Context, limit float64, log *slog.Logger) {
	if limit <= 0 {
		return
	}
	deadline := time.Now().Add(10 * time.Minute)
	for l := loadAvg(); l[0] >= limit && time.Now().Before(deadline); l = loadAvg() {
		log.Info("waiting for the machine to calm down", "load1", l[0], "limit", limit)
		select {
		case <-ctx.Done():
			return
		case <-time.After(15 * time.Second):
		}
	}
}

func commandLine(args []string) string {
	parts := []string{"go run ./bench"}
	for _, a := range args {
		if strings.HasPrefix(a, "-database-url") || strings.HasPrefix(a, "--database-url") {
			parts = append(parts, "-database-url=…")
			continue
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func printTable(w io.Writer, rows []row) {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "benchmark\tmetric\tours\tnaive\tgain\ttarget\tresult\treps\t")
	for _, r := range rows {
		naive := "—"
		if r.Naive != nil {
			naive = formatValue(*r.Naive, r.Unit)
		}
		tgt := "—"
		if r.Target != nil {
			tgt = r.Target.Text
		}
		ours := formatValue(r.Ours, r.Unit)
		if r.Status == statusError {
			ours = "—"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t\n", r.Bench, r.Metric, ours, naive, formatGain(r.Gain), tgt, r.Status, r.Reps)
	}
	_ = tw.Flush()
	for _, r := range rows {
		if r.Note != "" {
			fmt.Fprintf(w, "  · %s/%s: %s\n", r.Bench, r.Metric, r.Note)
		}
	}
}

func printReport(w io.Writer, rep report) {
	fmt.Fprintf(w, "GCOS benchmarks — %s\n", rep.Command)
	fmt.Fprintf(w, "started %s · %d CPUs · PostgreSQL %s (%s) · %s · births %s · reps %d\n",
		rep.StartedAt.Format(time.RFC3339), rep.Host.CPUs, rep.Host.PostgreSQL, rep.Host.Server, rep.Host.GoVersion,
		thousands(int64(rep.Births)), rep.Reps)
	fmt.Fprintf(w, "load average at start %s, at finish %s\n", rep.Host.LoadAtStart, rep.Host.LoadAtFinish)
	for _, b := range rep.Benchmarks {
		fmt.Fprintf(w, "  %-9s %6.1f s  load before %s, after %s", b.Name, b.Elapsed, b.LoadBefore, b.LoadAfter)
		if b.Error != "" {
			fmt.Fprintf(w, "  ERROR")
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "gain = how many times better GCOS is than the naive baseline (naive÷ours for costs, ours÷naive for rates)")
	fmt.Fprintln(w)
	printTable(w, rep.Rows)
}
