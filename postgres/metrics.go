package postgres

// What this process's scan runs did, for /metrics. The store core counts them because every stage that runs
// scans (the scan stage's ticks, the backfill, the full audit) finishes its runs through it or beside it.

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// runMetrics are the scan runs this process finished, by mode and outcome, and how long they took.
type runMetrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newRunMetrics() runMetrics {
	m := runMetrics{
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gcos_scan_runs_total",
			Help: "Scan runs this process finished, by mode (backfill, event, incremental, full_audit) and outcome (succeeded, failed).",
		}, []string{"mode", "outcome"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "gcos_scan_run_duration_seconds",
			Help:    "Duration of the scan runs this process finished, by mode: a tick for event and incremental runs, the whole run for a backfill or a full audit.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}, []string{"mode"}),
	}
	// Every series exists from the start, so a rate over a quiet mode is 0 rather than absent.
	for _, mode := range ScanModes {
		for _, outcome := range []string{RunSucceeded, RunFailed} {
			m.runs.WithLabelValues(mode, outcome)
		}
		m.duration.WithLabelValues(mode)
	}
	return m
}

// ObserveRun counts one finished run of mode with its outcome (RunSucceeded, RunFailed) and duration.
func (s *Store) ObserveRun(mode, outcome string, d time.Duration) {
	s.runMetrics.runs.WithLabelValues(mode, outcome).Inc()
	s.runMetrics.duration.WithLabelValues(mode).Observe(d.Seconds())
}

// RunCollectors are the collectors of ObserveRun, for the registry that serves /metrics.
func (s *Store) RunCollectors() []prometheus.Collector {
	return []prometheus.Collector{s.runMetrics.runs, s.runMetrics.duration}
}

// DeadLetter is one dead-letter lane: entries of event_pending that failed their attempts and wait for an operator.
type DeadLetter struct {
	Domain string // event_domain: the intake's retry lane or an event domain
	Table  string // entity_table: the source the entries came from
	Count  int64
}

// DeadLetters counts the dead-lettered entries not yet replayed, by lane. event_pending is a substrate table GCOS
// may not index: this is a scan of it, so callers read it at scrape or status cadence, not per request.
func (s *Store) DeadLetters(ctx context.Context) ([]DeadLetter, error) {
	rows, err := s.pool.Query(ctx, `SELECT event_domain, entity_table, count(*) FROM event_pending
		WHERE dead_lettered_at IS NOT NULL AND processed_at IS NULL GROUP BY 1, 2 ORDER BY 1, 2`)
	if err != nil {
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	defer rows.Close()
	var out []DeadLetter
	for rows.Next() {
		var d DeadLetter
		if err := rows.Scan(&d.Domain, &d.Table, &d.Count); err != nil {
			return nil, fmt.Errorf("count dead letters: %w", err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	return out, nil
}
