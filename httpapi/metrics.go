package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gcos"
	"gcos/intake"
)

// Bounds on the reads behind a scrape, both below Prometheus's default scrape timeout (10 s): the small reads
// (summary, cursors, dead letters) share stateTimeout; the ledger, which counts the whole estate (2–3 s at 1M
// births under churn), has its own ledgerTimeout, and a slow ledger costs only the ledger's series.
const (
	stateTimeout  = 3 * time.Second
	ledgerTimeout = 8 * time.Second
)

// Gate channels: who asked. The CLI names itself in its User-Agent when it asks a running daemon.
const (
	channelHTTP = "http"
	channelCLI  = "cli"
)

// metrics are the API's own instruments plus the gauges read from GCOS's state at scrape time.
type metrics struct {
	gateDecisions *prometheus.CounterVec   // decision, source, channel
	gateLatency   *prometheus.HistogramVec // kind (single, batch), decision
	requests      *prometheus.CounterVec
	handler       http.Handler
}

func newMetrics(reg *prometheus.Registry, s *server, version string) (*metrics, error) {
	m := &metrics{
		gateDecisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gcos_gate_decisions_total",
			Help: "Gate decisions answered, by decision (allow, block), source of the state read (view, database; none when nothing could be read) and channel (http; cli: the gcos CLI asking this daemon).",
		}, []string{"decision", "source", "channel"}),
		gateLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gcos_gate_duration_seconds",
			Help:    "Time to answer a gate request, from routing to the decision, by kind (single, batch) and decision (a batch's: block if any check blocks).",
			Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}, []string{"kind", "decision"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gcos_http_requests_total", Help: "HTTP requests answered, by route pattern (unmatched: no route) and status code.",
		}, []string{"route", "code"}),
	}
	for _, d := range []string{gcos.GateAllow, gcos.GateBlock} {
		for _, kind := range []string{"single", "batch"} {
			m.gateLatency.WithLabelValues(kind, d)
		}
	}
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "gcos_build_info", Help: "Always 1; the version label names the running build.",
		ConstLabels: prometheus.Labels{"version": version},
	})
	build.Set(1)
	// The intake of a daemon runs in the same process and store as its API.
	fallbacks := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "gcos_route_fallbacks_total",
		Help: "Changes the intake could not place precisely (object or authority row not found), so they dirtied every group they might affect.",
	}, func() float64 { return float64(s.intake.RouteFallbacks()) })
	retries := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "gcos_tx_retries_total",
		Help: "Transactions of this process that failed on a deadlock or a serialization conflict and were retried by their loop.",
	}, func() float64 { return float64(s.store.Counters().TxRetries) })
	// The places taken against http.max_concurrent and http.max_concurrent_gate: at the cap, requests are shed.
	inProgress := func(class string, slots chan struct{}) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "gcos_http_requests_in_progress",
			Help:        "Requests being answered, by class of places (read: every capped route but the gate; gate).",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(len(slots)) })
	}
	collectors := []prometheus.Collector{m.gateDecisions, m.gateLatency, m.requests, build, fallbacks, retries,
		inProgress("read", s.slots), inProgress("gate", s.gateSlots), &stateCollector{s: s}}
	for _, c := range append(append(collectors, s.store.RunCollectors()...), s.gate.Collectors()...) {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:  promhttp.ContinueOnError,
		CoalesceGather: true, // one state read however many scrapers arrive at once
	})
	return m, nil
}

// channelOf says who asked: the gcos CLI (its User-Agent) or any other HTTP client.
func channelOf(r *http.Request) string {
	if strings.HasPrefix(r.UserAgent(), "gcos-cli/") {
		return channelCLI
	}
	return channelHTTP
}

// sourceLabel is the gate answer's source as a label: none when nothing could be read.
func sourceLabel(source string) string {
	if source == "" {
		return "none"
	}
	return source
}

// observeGateBatch counts a batch's decisions and its latency under the batch's decision (none for a refused
// batch: d = 0).
func (m *metrics) observeGateBatch(r *http.Request, out gcos.GateBatchAnswer, d time.Duration) {
	ch, src := channelOf(r), sourceLabel(out.Source)
	m.gateDecisions.WithLabelValues(gcos.GateAllow, src, ch).Add(float64(out.Allowed))
	m.gateDecisions.WithLabelValues(gcos.GateBlock, src, ch).Add(float64(out.Blocked))
	if d > 0 {
		m.gateLatency.WithLabelValues("batch", out.Decision).Observe(d.Seconds())
	}
}

// observeGate counts one decision and its latency (none for a refused request: d = 0).
func (m *metrics) observeGate(r *http.Request, decision, source string, d time.Duration) {
	m.gateDecisions.WithLabelValues(decision, sourceLabel(source), channelOf(r)).Inc()
	if d > 0 {
		m.gateLatency.WithLabelValues("single", decision).Observe(d.Seconds())
	}
}

var (
	descStateUp     = prometheus.NewDesc("gcos_state_up", "1 when GCOS's state behind the gcos_* gauges (summary, ledger, cursors, dead letters) was read at this scrape, else 0.", nil, nil)
	descGroups      = prometheus.NewDesc("gcos_groups", "Groups by scope and effective verdict (as of the scrape).", []string{"scope", "verdict"}, nil)
	descObjects     = prometheus.NewDesc("gcos_group_objects", "Objects by scope and effective verdict of their group (each object counted once per scope).", []string{"scope", "verdict"}, nil)
	descDirty       = prometheus.NewDesc("gcos_dirty_groups", "Groups with a pending dirty mark (the dirty set).", nil, nil)
	descScanLag     = prometheus.NewDesc("gcos_scan_lag_seconds", "Age of the oldest pending dirty mark; 0 with an empty dirty set.", nil, nil)
	descFailed      = prometheus.NewDesc("gcos_failed_groups", "Groups whose last recompute failed.", nil, nil)
	descOpenFinding = prometheus.NewDesc("gcos_open_findings", "Open findings by issue type.", []string{"type"}, nil)
	descLastRun     = prometheus.NewDesc("gcos_scan_last_finished_timestamp_seconds",
		"When the last scan run of each mode finished (Unix time), with that run's status.", []string{"mode", "status"}, nil)
	descSnapshotAge = prometheus.NewDesc("gcos_snapshot_age_seconds", "Age of the newest source snapshot verdicts are qualified by.", nil, nil)
	descProofAt     = prometheus.NewDesc("gcos_audit_last_proof_timestamp_seconds",
		"When the full audit last proved a slice of its rotating cover against a from-scratch evaluation (Unix time).", nil, nil)
	descProofMiss = prometheus.NewDesc("gcos_audit_last_proof_mismatches",
		"Settled differences the full audit's last proof found between the incremental state and a from-scratch evaluation.", nil, nil)
	descLedger = prometheus.NewDesc("gcos_ledger_objects",
		"The coverage invariant's ledger per scope, in objects, by bucket (covered, orphans, approved_exceptions, retired_or_ignored, stale, deferred_birth, class_0).",
		[]string{"scope", "bucket"}, nil)
	descLedgerTotal  = prometheus.NewDesc("gcos_ledger_total_objects", "Objects the ledger of each scope must account for (its total).", []string{"scope"}, nil)
	descLedgerCloses = prometheus.NewDesc("gcos_ledger_closes", "1 when the scope's ledger closes (total = the sum of its buckets), else 0.", []string{"scope"}, nil)
	descIntakeRows   = prometheus.NewDesc("gcos_intake_rows_total",
		"Rows the intake tail met, by source and outcome: handed_off (in cursor order), behind (found behind the committed cursor, "+
			"handed off late), future (beyond the future tolerance, handed off early), unmapped (no mapping rule; reported), "+
			"untrusted (quarantined), dead_lettered.", []string{"source", "outcome"}, nil)
	descCursorAge = prometheus.NewDesc("gcos_intake_cursor_age_seconds",
		"Time since each source's intake tail last ran (its cursor's last run); a tail that stopped grows it.", []string{"source"}, nil)
	descIntakeLag = prometheus.NewDesc("gcos_intake_lag_seconds",
		"How long the oldest source row not yet handed off has waited, as the intake last measured it (0 when caught up).", []string{"source"}, nil)
	descDeadLetters = prometheus.NewDesc("gcos_dead_letters",
		"Dead-lettered entries waiting for an operator (event_pending), by lane (domain) and source table.", []string{"domain", "table"}, nil)
	stateDescs = []*prometheus.Desc{descStateUp, descGroups, descObjects, descDirty, descScanLag, descFailed, descOpenFinding,
		descLastRun, descSnapshotAge, descProofAt, descProofMiss, descLedger, descLedgerTotal, descLedgerCloses, descIntakeRows,
		descCursorAge, descIntakeLag, descDeadLetters}
)

// stateCollector reads GCOS's state at scrape time (the summary, the invariant ledger through the API's read
// cache, the intake cursors and lags, the dead letters) and reports it as gauges.
type stateCollector struct{ s *server }

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range stateDescs {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
	defer cancel()
	up := 1.0
	defer func() { ch <- prometheus.MustNewConstMetric(descStateUp, prometheus.GaugeValue, up) }()
	fail := func(what string, err error) {
		c.s.logger.Warn("metrics: read "+what, "err", err)
		up = 0
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	sum, err := c.s.store.Summary(ctx)
	if err != nil {
		fail("summary", err)
		return
	}
	// Every verdict is reported in every scope, zero included, so a series does not vanish when its last group
	// leaves it.
	verdicts := []string{string(gcos.VerdictStale)}
	for _, v := range gcos.StoredVerdicts {
		verdicts = append(verdicts, string(v))
	}
	for _, sc := range sum.Scopes {
		scope := "none"
		if sc.Scope != nil {
			scope = *sc.Scope
		}
		for _, v := range verdicts {
			n := sc.Verdicts[v]
			gauge(descGroups, float64(n.Groups), scope, v)
			gauge(descObjects, float64(n.Objects), scope, v)
		}
	}
	gauge(descDirty, float64(sum.DirtyGroups))
	gauge(descScanLag, sum.ScanHealth.ScanLagSeconds)
	gauge(descFailed, float64(sum.ScanHealth.FailedGroups))
	// Every finding type of the vocabulary, zero included (an alert on one must not see it absent), and any
	// other type that is open.
	for _, spec := range gcos.IssueSpecs {
		gauge(descOpenFinding, float64(sum.OpenFindings[string(spec.Type)]), string(spec.Type))
	}
	for typ, n := range sum.OpenFindings {
		if !slices.ContainsFunc(gcos.IssueSpecs, func(spec gcos.IssueSpec) bool { return string(spec.Type) == typ }) {
			gauge(descOpenFinding, float64(n), typ)
		}
	}
	for mode, run := range sum.ScanHealth.LastRuns {
		if run.FinishedAt != nil {
			gauge(descLastRun, float64(run.FinishedAt.UnixMicro())/1e6, mode, run.Status)
		}
	}
	if sum.LastSnapshot != nil {
		gauge(descSnapshotAge, max(0, sum.At.Sub(sum.LastSnapshot.SnapshotAt).Seconds()))
	}
	if sum.Cover != nil {
		gauge(descProofAt, float64(sum.Cover.VerifiedAt.UnixMicro())/1e6)
		gauge(descProofMiss, float64(sum.Cover.Mismatches))
	}

	// The intake's counters live on its cursors (written in the transactions that handled the rows).
	cursors, err := c.s.intake.ListCursors(ctx)
	if err != nil {
		fail("intake cursors", err)
	} else {
		for _, cur := range cursors {
			for outcome, n := range map[string]int64{"handed_off": cur.EventsSeen, "behind": cur.LateRows, "future": cur.FutureRows,
				"unmapped": cur.UnmappedRows, "untrusted": cur.UntrustedRows, "dead_lettered": cur.DeadLettered} {
				ch <- prometheus.MustNewConstMetric(descIntakeRows, prometheus.CounterValue, float64(n), cur.Source, outcome)
			}
			if cur.LastRunAt != nil {
				gauge(descCursorAge, max(0, sum.At.Sub(*cur.LastRunAt).Seconds()), cur.Source)
			}
		}
	}
	for _, lag := range c.s.intake.Lags() {
		gauge(descIntakeLag, lag.OldestUnreadAgeSeconds, lag.Source)
	}
	// Each tailed source's retry lane is reported at 0 too, so the first dead letter is a change an alert sees;
	// an unread count is no series at all, never a 0.
	if dead, err := c.s.store.DeadLetters(ctx); err != nil {
		fail("dead letters", err)
	} else {
		lanes := map[[2]string]int64{}
		for _, cur := range cursors {
			lanes[[2]string{intake.RetryDomain, cur.Source}] = 0
		}
		for _, d := range dead {
			lanes[[2]string{d.Domain, d.Table}] = d.Count
		}
		for lane, n := range lanes {
			gauge(descDeadLetters, float64(n), lane[0], lane[1])
		}
	}
	// The ledger through the API's read cache: a scrape costs what a dashboard poll costs.
	lctx, lcancel := context.WithTimeout(context.Background(), ledgerTimeout)
	defer lcancel()
	body, _, err := c.s.invariants.get(lctx, "", c.s.computeInvariant(""))
	var inv InvariantView
	if err == nil {
		err = json.Unmarshal(body, &inv)
	}
	if err != nil {
		fail("invariant", err)
	} else {
		for _, l := range inv.Ledgers {
			for bucket, n := range map[string]int64{"covered": l.Covered, "orphans": l.Orphans, "approved_exceptions": l.ApprovedExceptions,
				"retired_or_ignored": l.RetiredOrIgnored, "stale": l.Stale, "deferred_birth": l.DeferredBirth, "class_0": l.Class0} {
				gauge(descLedger, float64(n), l.Scope, bucket)
			}
			gauge(descLedgerTotal, float64(l.Total), l.Scope)
			closes := 0.0
			if l.Closes {
				closes = 1
			}
			gauge(descLedgerCloses, closes, l.Scope)
		}
	}
}
