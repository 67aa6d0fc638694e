package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// Worker tails its sources and hands their rows to Apply. One Worker serves every source; several Workers (in
// several processes) may run against one database: a source's cursor is locked per poll, so a second worker finds
// it busy and never reads a row twice.
type Worker struct {
	Stage   *Stage
	Config  gcos.IntakeConfig
	Sources []postgres.TailSource // nil: postgres.DefaultTailSources of the store's configuration
	Logger  *slog.Logger
	// Apply runs inside each poll's transaction (see ApplyFunc); nil: the stage's handoff apply step.
	Apply ApplyFunc
	// DisableMonitor keeps Run from running the silent-gap Monitor next to the tail (a process that runs its own).
	DisableMonitor bool

	lastLag map[string]time.Time
	counts  map[string]int64 // since the worker started, for governance.handoff.heartbeat
	lastOK  atomic.Int64     // unix nanoseconds at the end of the last pass over every source without an error
	running atomic.Bool      // Run has started polling and has not returned
}

// Ready reports whether the tail is live: it completed a pass over every source without an error within
// intake.lag_threshold. A tail that waits on another process's lock is live; one that keeps failing is not.
func (w *Worker) Ready() error {
	last := w.lastOK.Load()
	if last == 0 {
		return gcos.Errorf(gcos.EUNAVAILABLE, "intake has not completed a poll yet")
	}
	if age := time.Since(time.Unix(0, last)); age > w.Config.LagThreshold.Duration() {
		return gcos.Errorf(gcos.EUNAVAILABLE, "intake has not completed a poll for %s (intake.lag_threshold %s)", age.Round(time.Second), w.Config.LagThreshold.Duration())
	}
	return nil
}

// Running reports whether Run is polling the sources: a tail that does not move is then behind, not unattended.
func (w *Worker) Running() bool { return w.running.Load() }

// SourceTick is what one pass did for one source.
type SourceTick struct {
	Source       string         `json:"source"`
	Polls        int            `json:"polls"`
	Read         int            `json:"read"`
	Applied      int            `json:"applied"`
	Failed       int            `json:"failed"` // rows sent to the retry lane
	DeadLettered int            `json:"dead_lettered"`
	Retry        RetryResult    `json:"retry"`
	Busy         bool           `json:"busy,omitempty"`
	PageFull     bool           `json:"page_full"` // stopped with more rows waiting (Run's page budget)
	Position     string         `json:"position"`
	Horizon      time.Time      `json:"horizon"`
	HeldBy       *HorizonHolder `json:"held_by,omitempty"`
	Stalled      string         `json:"stalled,omitempty"`
	Lag          *LagReport     `json:"lag,omitempty"`
	Error        string         `json:"error,omitempty"`
	Dirtied      int64          `json:"dirtied"` // groups the pass's committed polls newly marked dirty

	marked []string // their keys
}

// pagesPerTick bounds how many pages Run reads from one source before turning to the next, so a backlog in one
// source does not starve the others (Run comes straight back without sleeping).
const pagesPerTick = 20

func (w *Worker) logger() *slog.Logger {
	if w.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Logger.With("system", "intake")
}

func (w *Worker) sources() []postgres.TailSource {
	if w.Sources != nil {
		return w.Sources
	}
	return postgres.DefaultTailSources(w.Stage.cfg.Binding)
}

// Start checks every source's preconditions (refusing, with the store's message, when a tail could not be
// lossless) and makes sure each has a cursor.
func (w *Worker) Start(ctx context.Context) error {
	if w.Stage == nil {
		return gcos.Errorf(gcos.EINVALID, "intake: no stage")
	}
	if w.Apply == nil {
		w.Apply = w.Stage.Apply
	}
	log := w.logger()
	for _, src := range w.sources() {
		check, err := w.Stage.CheckTail(ctx, src, w.Config)
		for _, it := range check.Items {
			if it.Status == CheckWarn {
				log.Warn("intake precondition", "source", src.Name, "check", it.Name, "detail", it.Detail)
			}
		}
		if err != nil {
			return err
		}
		c, err := w.Stage.EnsureCursor(ctx, src)
		if err != nil {
			return err
		}
		log.Info("intake source ready", "source", src.Name, "position", c.Position, "ts_type", c.TSType,
			"time_zone", c.TimeZone)
	}
	return nil
}

// Once starts the worker and makes one full pass: every source is read until caught up with its horizon, due
// retries are re-applied, the heartbeat ticks and the lag is checked. Per-source errors are reported in the
// ticks and joined into the error.
func (w *Worker) Once(ctx context.Context) ([]SourceTick, error) {
	if err := w.Start(ctx); err != nil {
		return nil, err
	}
	var ticks []SourceTick
	var errs []error
	for _, src := range w.sources() {
		t, err := w.pass(ctx, src, 0, true)
		ticks = append(ticks, t)
		w.count(t)
		if err != nil {
			errs = append(errs, err)
		}
	}
	rt, err := w.Stage.PollRegistries(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	if _, err := w.Stage.WatchStorm(ctx, tickDirtied(ticks, rt)); err != nil {
		errs = append(errs, err)
	}
	w.heartbeat(ctx)
	return ticks, errors.Join(errs...)
}

// tickDirtied is how many groups one tick of the tail marked dirty: its passes over the sources and its poll of
// the watched registries, each group once however many of its pages marked it (the storm rule's numerator,
// Stage.WatchStorm).
func tickDirtied(passes []SourceTick, rt RegistryTick) int64 {
	groups := map[string]bool{}
	for _, k := range rt.marked {
		groups[k] = true
	}
	for _, t := range passes {
		for _, k := range t.marked {
			groups[k] = true
		}
	}
	return int64(len(groups))
}

// count adds a pass to the counts the next heartbeat event reports.
func (w *Worker) count(t SourceTick) {
	if w.counts == nil {
		w.counts = map[string]int64{}
	}
	w.counts["seen"] += int64(t.Read)
	w.counts["enqueued"] += int64(t.Applied + t.Retry.Succeeded)
	w.counts["failed"] += int64(t.Failed + t.Retry.Failed)
	w.counts["dlq"] += int64(t.DeadLettered + t.Retry.DeadLettered)
}

// heartbeat announces governance.handoff.heartbeat (through the one emit path: captured while the type is not
// active, released under the emission discipline, whose cooldown makes it a periodic summary) carrying what the
// worker did since it started: source rows seen, rows coalesced into another row's signal, rows enqueued (applied),
// failed and dead-lettered. The counts are running totals, so a heartbeat the cooldown superseded loses nothing. A
// failure is logged, never fatal: the queue_heartbeat ticks, not this event, are what the silent-gap monitor reads.
func (w *Worker) heartbeat(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	c := maps.Clone(w.counts)
	if c == nil {
		c = map[string]int64{}
	}
	h := w.Stage.HandoffTotals()
	c["coalesced"] = max(0, int64(h.Rows-h.Signals-h.Skipped-h.Unmapped-h.Untrusted))
	beat, err := postgres.Heartbeat("handoff", c)
	var res postgres.EmitResult
	if err == nil {
		err = w.Stage.core.InTx(ctx, func(tx pgx.Tx) error {
			var err error
			res, err = postgres.EmitSignal(ctx, tx, beat)
			return err
		})
	}
	if err != nil {
		if ctx.Err() == nil {
			w.logger().Warn("heartbeat event", "error", err)
		}
		return
	}
	w.logger().Debug("heartbeat", "outcome", res.Outcome, "seen", c["seen"], "coalesced", c["coalesced"],
		"enqueued", c["enqueued"], "failed", c["failed"], "dlq", c["dlq"])
}

func (w *Worker) heartbeatInterval() time.Duration {
	if d := w.Config.HeartbeatInterval.Duration(); d > 0 {
		return d
	}
	return 5 * time.Second
}

// Run starts the worker and polls until ctx ends, which it treats as a clean stop (nil). A precondition failure
// stops it with that error; any other error (the database restarting, a failed apply) is logged, ticked into
// the heartbeat and retried with backoff — a row is never skipped. Every source's queue_heartbeat row ticks after
// each pass (also an empty one: quiet is not dead), governance.handoff.heartbeat is emitted once per
// intake.heartbeat_interval, and, unless DisableMonitor, the silent-gap Monitor runs beside the tail.
func (w *Worker) Run(ctx context.Context) error {
	log := w.logger()
	outageCfg := w.Stage.cfg.Outage
	startOutage := gcos.NewOutageLog("intake start", w.pollInterval(), outageCfg, log)
	for {
		err := w.Start(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		switch gcos.ErrorCode(err) {
		case gcos.EINVALID, gcos.ECONFLICT, gcos.ENOTFOUND:
			return err
		}
		if !sleep(ctx, startOutage.Failed(err)) {
			return nil
		}
	}
	startOutage.Succeeded()
	w.running.Store(true)
	defer w.running.Store(false)
	if !w.DisableMonitor {
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = (&Monitor{Stage: w.Stage, Config: w.Config, Logger: w.Logger}).Run(mctx)
		}()
		defer func() { stop(); <-done }()
	}
	lagEvery := max(w.pollInterval(), min(w.Config.LagThreshold.Duration()/4, 30*time.Second))
	w.lastLag = map[string]time.Time{}
	outage := gcos.NewOutageLog("intake poll (nothing is skipped)", w.pollInterval(), outageCfg, log)
	lastBeat := time.Now()
	var lastRegistries time.Time
	hit, step := false, time.Duration(0) // whether the last idle wait ended on a probe's row, and its probe interval
	registryOutage := gcos.NewOutageLog("registry watch", w.Config.RegistryPoll.Duration(), outageCfg, log)
	for {
		busy, failed := false, false
		var pollErr error
		var rt RegistryTick
		var passes []SourceTick
		if time.Since(lastRegistries) >= w.Config.RegistryPoll.Duration() {
			lastRegistries = time.Now()
			// A registry that cannot be read never slows the tails: its failure is logged once per outage, and a
			// token's question waits on it (its rows are not handed off) until it can.
			var err error
			rt, err = w.Stage.PollRegistries(ctx)
			switch {
			case err != nil && ctx.Err() == nil:
				registryOutage.Failed(err)
			case err == nil:
				registryOutage.Succeeded()
			}
			if len(rt.Changed) > 0 {
				log.Debug("registry watch: handed off changed rows", "changed", rt.Changed,
					"signals", rt.Stats.Signals, "dirtied", rt.Stats.Dirtied)
			}
		}
		for _, src := range w.sources() {
			if ctx.Err() != nil {
				break
			}
			checkLag := time.Since(w.lastLag[src.Name]) >= lagEvery
			t, err := w.pass(ctx, src, pagesPerTick, checkLag)
			if checkLag {
				w.lastLag[src.Name] = time.Now()
			}
			if ctx.Err() != nil {
				break
			}
			w.count(t)
			passes = append(passes, t)
			switch {
			case err != nil:
				failed = true
				pollErr = fmt.Errorf("source %s: %w", src.Name, err)
			case t.Stalled != "":
				log.Warn("intake stalled", "source", src.Name, "reason", t.Stalled)
			case t.Read > 0 || t.Retry.Attempted > 0:
				log.Debug("intake pass", "source", src.Name, "read", t.Read, "failed", t.Failed,
					"retried", t.Retry.Attempted, "dead_lettered", t.DeadLettered+t.Retry.DeadLettered, "position", t.Position)
			}
			if t.Lag != nil && t.Lag.Lagging {
				log.Warn("handoff lag", "source", src.Name, "reason", t.Lag.Reason)
			}
			busy = busy || t.PageFull
		}
		if ctx.Err() != nil {
			w.stopped(src0(w.sources()))
			return nil
		}
		// A storm the rule cannot judge now is judged by no later tick (the marks are made): logged, never fatal to
		// the tail, which loses nothing by it.
		if _, err := w.Stage.WatchStorm(ctx, tickDirtied(passes, rt)); err != nil && ctx.Err() == nil {
			log.Warn("storm rule", "err", err)
		}
		if !failed {
			w.lastOK.Store(time.Now().UnixNano())
		}
		if !failed && time.Since(lastBeat) >= w.heartbeatInterval() {
			w.heartbeat(ctx)
			lastBeat = time.Now()
		}
		wait := w.pollInterval()
		switch {
		case failed:
			wait = outage.Failed(pollErr)
		case busy:
			wait = 0
			outage.Succeeded()
		default:
			outage.Succeeded()
		}
		alive := true
		if probe := min(w.Config.ProbeInterval.Duration(), w.pollInterval()); probe > 0 && !failed && !busy && quiet(passes, w.Config.ProbeQuietRows) {
			// A probe's row the poll could not read yet (held back by a transaction still open) is probed for
			// less and less often, down to the poll's own cadence.
			switch {
			case hit && readNothing(passes):
				step = min(2*step, wait)
			default:
				step = probe
			}
			hit, alive = w.idleWait(ctx, wait, step)
		} else {
			hit, alive = false, sleep(ctx, wait)
		}
		if !alive {
			w.stopped(src0(w.sources()))
			return nil
		}
	}
}

// readNothing reports whether a tick's passes read no row.
func readNothing(passes []SourceTick) bool {
	for _, t := range passes {
		if t.Read > 0 {
			return false
		}
	}
	return true
}

// quiet reports whether a tick's passes read and retried at most most rows: too few for waiting to batch anything.
func quiet(passes []SourceTick, most int) bool {
	n := 0
	for _, t := range passes {
		n += t.Read + t.Retry.Attempted
	}
	return n <= most
}

// idleWait waits up to d for a row to land beyond a source's cursor, probing every source each step (Stage.Probe).
// When one has, it waits out the horizon guard (the poll reads only rows older than that) and reports the hit, so
// the next poll runs at once. A probe that fails falls back to the poll's cadence. It reports whether ctx is alive.
func (w *Worker) idleWait(ctx context.Context, d, step time.Duration) (hit, alive bool) {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false, ctx.Err() == nil
		}
		if !sleep(ctx, min(step, left)) {
			return false, false
		}
		for _, src := range w.sources() {
			found, err := w.Stage.Probe(ctx, src)
			if err != nil {
				w.logger().Debug("intake probe failed; polling at the poll interval", "source", src.Name, "err", err)
				return false, sleep(ctx, time.Until(deadline))
			}
			if found {
				return true, sleep(ctx, w.Config.HorizonGuard.Duration())
			}
		}
	}
}

func src0(srcs []postgres.TailSource) []string {
	names := make([]string, len(srcs))
	for i, s := range srcs {
		names[i] = s.Name
	}
	return names
}

// stopped records a clean stop in the heartbeat, so "stopped" and "dead" differ.
func (w *Worker) stopped(sources []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, s := range sources {
		_ = w.Stage.IntakeHeartbeat(ctx, s, "stopped")
	}
}

func (w *Worker) pollInterval() time.Duration {
	if d := w.Config.PollInterval.Duration(); d > 0 {
		return d
	}
	return 200 * time.Millisecond
}

// pass polls src until it is caught up with its horizon (or maxPages pages were read; 0 = no limit), re-applies
// due retries, optionally checks the lag, and ticks the heartbeat with the outcome.
func (w *Worker) pass(ctx context.Context, src postgres.TailSource, maxPages int, checkLag bool) (SourceTick, error) {
	t := SourceTick{Source: src.Name}
	err := func() error {
		for maxPages == 0 || t.Polls < maxPages {
			res, err := w.Stage.PollTail(ctx, src, w.Config, w.Apply)
			if err != nil {
				return err
			}
			t.Polls++
			t.Read += res.Read
			t.Applied += res.Applied
			t.Failed += res.Failed
			t.DeadLettered += res.DeadLettered
			t.Busy, t.PageFull, t.HeldBy, t.Stalled = res.Busy, res.PageFull, res.HeldBy, res.Stalled
			if !res.Busy {
				t.Position, t.Horizon = res.Position, res.Horizon
			}
			t.Dirtied += res.Dirtied
			t.marked = append(t.marked, res.marked...)
			if !res.PageFull {
				break
			}
		}
		retry, err := w.Stage.RetryDue(ctx, src, w.Config, w.Apply)
		t.Retry = retry
		if err != nil {
			return err
		}
		if checkLag {
			lag, err := w.Stage.CheckTailLag(ctx, src, w.Config)
			if err != nil {
				return err
			}
			t.Lag = &lag
		}
		return nil
	}()
	status := fmt.Sprintf("ok read=%d failed=%d retried=%d", t.Read, t.Failed, t.Retry.Attempted)
	switch {
	case err != nil:
		t.Error = err.Error()
		status = "error: " + t.Error
	case t.Stalled != "":
		status = "stalled: " + t.Stalled
	case t.Busy:
		status = "busy: another worker holds the cursor"
	}
	if ctx.Err() == nil {
		if herr := w.Stage.IntakeHeartbeat(ctx, src.Name, status); herr != nil && err == nil {
			err = herr
		}
	}
	return t, err
}

// sleep waits d or until ctx ends; it reports whether ctx is still alive.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}
