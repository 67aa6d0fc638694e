package main

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Better says which direction of a metric is good.
const (
	lower  = "lower"
	higher = "higher"
	exact  = "exact"
)

// Row statuses.
const (
	statusPass  = "PASS"
	statusMiss  = "MISS"
	statusInfo  = "INFO"
	statusError = "ERROR"
)

// target is one SPEC §14 target: ours must be <= / >= / == Value.
type target struct {
	Op    string  `json:"op"` // <=, >=, ==
	Value float64 `json:"value"`
	Text  string  `json:"text"` // as printed, e.g. "≤ 1 s"
}

func (t *target) met(v float64) bool {
	switch t.Op {
	case "<=":
		return v <= t.Value
	case ">=":
		return v >= t.Value
	case "==":
		return v == t.Value
	}
	return false
}

// row is one line of the results table.
type row struct {
	Bench        string    `json:"bench"`
	Metric       string    `json:"metric"`
	Unit         string    `json:"unit"`
	Better       string    `json:"better"`
	Ours         float64   `json:"ours"`
	Naive        *float64  `json:"naive,omitempty"`
	Gain         *float64  `json:"gain,omitempty"` // how many times better ours is than naive
	Target       *target   `json:"target,omitempty"`
	Status       string    `json:"status"`
	Reps         int       `json:"reps"`
	OursSamples  []float64 `json:"ours_samples,omitempty"`
	NaiveSamples []float64 `json:"naive_samples,omitempty"`
	Note         string    `json:"note,omitempty"`
}

// finish fills gain and status.
func (r *row) finish() {
	if r.Naive != nil && r.Better != exact {
		var g float64
		switch {
		case r.Better == lower && r.Ours > 0:
			g = *r.Naive / r.Ours
		case r.Better == higher && *r.Naive > 0:
			g = r.Ours / *r.Naive
		}
		if g > 0 && !math.IsInf(g, 0) && !math.IsNaN(g) {
			r.Gain = &g
		}
	}
	if r.Status != "" {
		return
	}
	switch {
	case r.Target == nil:
		r.Status = statusInfo
	case r.Target.met(r.Ours):
		r.Status = statusPass
	default:
		r.Status = statusMiss
	}
}

func fptr(v float64) *float64 { return &v }

// median of xs (NaN when empty).
func median(xs []float64) float64 { return percentile(xs, 50) }

// percentile by the nearest-rank method.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if p <= 0 {
		return s[0]
	}
	k := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[min(max(k, 0), len(s)-1)]
}

func secs(d time.Duration) float64 { return d.Seconds() }
func ms(d time.Duration) float64   { return float64(d) / float64(time.Millisecond) }

// formatValue prints a value in its unit, compactly.
func formatValue(v float64, unit string) string {
	if math.IsNaN(v) {
		return "—"
	}
	switch unit {
	case "s":
		switch {
		case v < 0.01:
			return fmt.Sprintf("%.2f ms", v*1000)
		case v < 1:
			return fmt.Sprintf("%.0f ms", v*1000)
		default:
			return fmt.Sprintf("%.2f s", v)
		}
	case "ms":
		if v >= 1000 {
			return fmt.Sprintf("%.2f s", v/1000)
		}
		if v < 10 {
			return fmt.Sprintf("%.2f ms", v)
		}
		return fmt.Sprintf("%.0f ms", v)
	case "rows/s", "decisions/s", "rows", "groups":
		return thousands(int64(math.Round(v))) + " " + unit
	case "MiB":
		if v < 10 {
			return fmt.Sprintf("%.2f MiB", v)
		}
		return fmt.Sprintf("%.0f MiB", v)
	case "×":
		return fmt.Sprintf("%.2f×", v)
	}
	return strconv.FormatFloat(v, 'g', 4, 64) + " " + unit
}

// thousands writes n with comma separators.
func thousands(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func formatGain(g *float64) string {
	if g == nil {
		return "—"
	}
	switch {
	case *g >= 100:
		return fmt.Sprintf("%.0f×", *g)
	case *g >= 10:
		return fmt.Sprintf("%.1f×", *g)
	default:
		return fmt.Sprintf("%.2f×", *g)
	}
}

// loadAvg reads /proc/loadavg (1, 5, 15 minutes).
func loadAvg() [3]float64 {
	var out [3]float64
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return out
	}
	f := strings.Fields(string(b))
	for i := 0; i < 3 && i < len(f); i++ {
		out[i], _ = strconv.ParseFloat(f[i], 64)
	}
	return out
}

func formatLoad(l [3]float64) string { return fmt.Sprintf("%.2f %.2f %.2f", l[0], l[1], l[2]) }

func mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	return sum / float64(len(xs))
}
