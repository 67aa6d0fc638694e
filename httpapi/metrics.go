package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"gcos"
)

// summaryTimeout bounds the Summary read behind a scrape.
const summaryTimeout = 3 * time.Second

// metrics are the API's own instruments plus the gauges read from Summary at scrape time.
type metrics struct {
	gateAllow, gateBlock prometheus.Counter
	gateLatency          prometheus.Histogram
	requests             *prometheus.CounterVec
	handler              http.Handler
}

func newMetrics(reg *prometheus.Registry, s *server, version string) (*metrics, error) {
	decisions := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "gcos_gate_decisions_total", Help: "Gate decisions answered over HTTP, by decision.",
	}, []string{"decision"})
	m := &metrics{
		gateAllow: decisions.WithLabelValues(gcos.GateAllow),
		gateBlock: decisions.WithLabelValues(gcos.GateBlock),
		gateLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "gcos_gate_duration_seconds",
			Help:    "Time to answer a gate request, from routing to the decision.",
			Buckets: []float64{.0005, .001, .002, .003, .005, .0075, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gcos_http_requests_total", Help: "HTTP requests answered, by route pattern and status code.",
		}, []string{"route", "code"}),
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
	}, func() float64 { return float64(s.store.TxRetries()) })
	// The places taken against http.max_concurrent and http.max_concurrent_gate: at the cap, requests are shed.
	inProgress := func(class string, slots chan struct{}) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "gcos_http_requests_in_progress",
			Help:        "Requests being answered, by class of places (read: every capped route but the gate; gate).",
			ConstLabels: prometheus.Labels{"class": class},
		}, func() float64 { return float64(len(slots)) })
	}
	for _, c := range []prometheus.Collector{decisions, m.gateLatency, m.requests, build, fallbacks, retries,
		inProgress("read", s.slots), inProgress("gate", s.gateSlots), &summaryCollector{s: s}} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:  promhttp.ContinueOnError,
		CoalesceGather: true, // one Summary read however many scrapers arrive at once
	})
	return m, nil
}

// observeGateBatch counts a batch's decisions and its latency.
func (m *metrics) observeGateBatch(allowed, blocked int, d time.Duration) {
	m.gateAllow.Add(float64(allowed))
	m.gateBlock.Add(float64(blocked))
	m.gateLatency.Observe(d.Seconds())
}

// observeGate counts one decision and its latency.
func (m *metrics) observeGate(decision string, d time.Duration) {
	if decision == gcos.GateAllow {
		m.gateAllow.Inc()
	} else {
		m.gateBlock.Inc()
	}
	m.gateLatency.Observe(d.Seconds())
}

var (
	descSummaryUp   = prometheus.NewDesc("gcos_summary_up", "1 when the summary behind the gcos_* gauges was read at this scrape, else 0.", nil, nil)
	descGroups      = prometheus.NewDesc("gcos_groups", "Groups by effective verdict (as of the scrape).", []string{"verdict"}, nil)
	descObjects     = prometheus.NewDesc("gcos_group_objects", "Objects by effective verdict of their group, counted once per scope.", []string{"verdict"}, nil)
	descDirty       = prometheus.NewDesc("gcos_dirty_groups", "Groups with a pending dirty mark (the dirty set).", nil, nil)
	descScanLag     = prometheus.NewDesc("gcos_scan_lag_seconds", "Age of the oldest pending dirty mark; 0 with an empty dirty set.", nil, nil)
	descFailed      = prometheus.NewDesc("gcos_failed_groups", "Groups whose last recompute failed.", nil, nil)
	descOpenFinding = prometheus.NewDesc("gcos_open_findings", "Open findings by issue type.", []string{"type"}, nil)
	descIntakeRows  = prometheus.NewDesc("gcos_intake_rows_total",
		"Rows the intake tail met, by source and outcome: handed_off (in cursor order), behind (found behind the committed cursor, "+
			"handed off late), future (beyond the future tolerance, handed off early), unmapped (no mapping rule; reported), "+
			"untrusted (quarantined), dead_lettered.", []string{"source", "outcome"}, nil)
)

// summaryCollector reads Store.Summary at scrape time and reports it as gauges.
type summaryCollector struct{ s *server }

func (c *summaryCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSummaryUp, descGroups, descObjects, descDirty, descScanLag, descFailed, descOpenFinding, descIntakeRows} {
		ch <- d
	}
}

func (c *summaryCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), summaryTimeout)
	defer cancel()
	sum, err := c.s.store.Summary(ctx)
	if err != nil {
		c.s.logger.Warn("metrics: read summary", "err", err)
		ch <- prometheus.MustNewConstMetric(descSummaryUp, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(descSummaryUp, prometheus.GaugeValue, 1)
	// Every verdict is reported, zero included, so a series does not vanish when its last group leaves it.
	verdicts := map[string]bool{string(gcos.VerdictStale): true}
	for _, v := range gcos.StoredVerdicts {
		verdicts[string(v)] = true
	}
	for v := range sum.Verdicts {
		verdicts[v] = true
	}
	for v := range verdicts {
		n := sum.Verdicts[v]
		ch <- prometheus.MustNewConstMetric(descGroups, prometheus.GaugeValue, float64(n.Groups), v)
		ch <- prometheus.MustNewConstMetric(descObjects, prometheus.GaugeValue, float64(n.Objects), v)
	}
	ch <- prometheus.MustNewConstMetric(descDirty, prometheus.GaugeValue, float64(sum.DirtyGroups))
	ch <- prometheus.MustNewConstMetric(descScanLag, prometheus.GaugeValue, sum.ScanHealth.ScanLagSeconds)
	ch <- prometheus.MustNewConstMetric(descFailed, prometheus.GaugeValue, float64(sum.ScanHealth.FailedGroups))
	for typ, n := range sum.OpenFindings {
		ch <- prometheus.MustNewConstMetric(descOpenFinding, prometheus.GaugeValue, float64(n), typ)
	}
	// The intake's counters live on its cursors (written in the transactions that handled the rows).
	cursors, err := c.s.intake.ListCursors(ctx)
	if err != nil {
		c.s.logger.Warn("metrics: read intake cursors", "err", err)
		return
	}
	for _, cur := range cursors {
		for outcome, n := range map[string]int64{"handed_off": cur.EventsSeen, "behind": cur.LateRows, "future": cur.FutureRows,
			"unmapped": cur.UnmappedRows, "untrusted": cur.UntrustedRows, "dead_lettered": cur.DeadLettered} {
			ch <- prometheus.MustNewConstMetric(descIntakeRows, prometheus.CounterValue, float64(n), cur.Source, outcome)
		}
	}
}
