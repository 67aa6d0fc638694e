package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
	"gcos/daemon"
	"gcos/httpapi"
	"gcos/intake"
	"gcos/postgres"
)

// memReport is what a memory child prints.
type memReport struct {
	RSSKiB int64  `json:"rss_kib"` // VmRSS at the end
	HWMKiB int64  `json:"hwm_kib"` // VmHWM: the peak
	Detail string `json:"detail"`
}

// procStatus reads VmRSS and VmHWM of this process in KiB.
func procStatus() (rss, hwm int64, err error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		v, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm, sc.Err()
}

// memoryChild runs one memory workload in this (fresh) process and prints its memReport as JSON.
func memoryChild(ctx context.Context, o *options, stdout io.Writer) error {
	if o.databaseURL == "" {
		return fmt.Errorf("-memory-child needs -database-url")
	}
	var detail string
	var err error
	switch o.memoryChild {
	case "ours":
		detail, err = memoryOurs(ctx, o)
	case "naive":
		detail, err = memoryNaive(ctx, o)
	default:
		return fmt.Errorf("-memory-child %q: want ours or naive", o.memoryChild)
	}
	if err != nil {
		return err
	}
	rss, hwm, err := procStatus()
	if err != nil {
		return err
	}
	return json.NewEncoder(stdout).Encode(memReport{RSSKiB: rss, HWMKiB: hwm, Detail: detail})
}

// memoryOurs does what `gcos up --demo` does on a freshly loaded world, in one process: open the store, backfill
// and activate, serve the API, run the intake over the whole world from the start (cursors reset: the worst case),
// the event and incremental scans
// and a full audit, and answer gate calls over HTTP.
func memoryOurs(ctx context.Context, o *options) (string, error) {
	cfg := benchConfig(o)
	limit, from := daemon.LimitMemory(cfg.Process) // as gcos up sets it (this child is a process of its own)
	store, err := postgres.Open(ctx, postgres.Databases{URL: o.databaseURL}, cfg, nil)
	if err != nil {
		return "", err
	}
	defer store.Close()
	// The peak after each phase, so a figure over its target names the phase that reached it.
	var phases []string
	mark := func(phase string) {
		if _, hwm, err := procStatus(); err == nil {
			phases = append(phases, fmt.Sprintf("%s %d", phase, hwm>>10))
		}
	}
	bf, err := prepare(ctx, store)
	if err != nil {
		return "", err
	}
	mark("backfill")
	// The heaviest intake a daemon can face: the whole history handed off again (the backfill started the cursors
	// at its horizon, so reset them to start).
	for _, src := range bf.CursorsAtHorizon {
		if _, err := intake.New(store).ResetCursor(ctx, src, "start"); err != nil {
			return "", err
		}
	}
	handler, err := httpapi.New(httpapi.Config{Store: store, HTTP: gcos.HTTPConfig{Listen: "127.0.0.1:0", InsecureNoAuth: true}})
	if err != nil {
		return "", err
	}
	srv := httptest.NewServer(handler)
	defer srv.Close()
	d, err := daemon.New(daemon.Config{Store: store})
	if err != nil {
		return "", err
	}
	ticks, err := d.Intake.Once(ctx)
	if err != nil {
		return "", fmt.Errorf("intake: %w", err)
	}
	read := 0
	for _, t := range ticks {
		read += t.Read
	}
	mark("intake")
	time.Sleep(cfg.Scan.CoalesceWindow.Duration())
	scanned, proof := 0, ""
	for _, mode := range []string{postgres.ModeEvent, postgres.ModeIncremental, postgres.ModeFullAudit} {
		p, err := d.Scan.Once(ctx, mode)
		if err != nil {
			return "", fmt.Errorf("scan %s: %w", mode, err)
		}
		scanned += p.Scanned
		mark(mode)
		if p.Verify != nil {
			proof = fmt.Sprintf("; the full audit proved %d collections (%d groups, %d object rows, %d gate decisions) against "+
				"a from-scratch evaluation in %.1f s, %d mismatches", len(p.Verify.Only), p.Verify.Groups, p.Verify.Objects,
				p.Verify.GateChecks, p.Verify.Elapsed, len(p.Verify.Mismatches))
		}
	}
	if proof == "" {
		return "", fmt.Errorf("the full audit did not verify")
	}
	refs, err := store.Pool().Query(ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY hashint8(id) LIMIT 1000`)
	if err != nil {
		return "", err
	}
	var objs []string
	for refs.Next() {
		var s string
		if err := refs.Scan(&s); err != nil {
			refs.Close()
			return "", err
		}
		objs = append(objs, s)
	}
	refs.Close()
	for _, obj := range objs {
		resp, err := http.Get(srv.URL + "/v1/gate?object=" + url.QueryEscape(obj) + "&action=write")
		if err != nil {
			return "", err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	mark("gate")
	page, catchUp := cfg.Intake.Pages()
	soft := "no soft memory limit"
	if from != "none" {
		soft = fmt.Sprintf("soft memory limit %d MiB (%s)", limit>>20, from)
	}
	return fmt.Sprintf("intake read %d rows in pages of %d (%d read ahead), scans evaluated %d groups, %d gate calls over HTTP%s; "+
		"%s; peak MiB after each phase: %s", read, page, catchUp, scanned, len(objs), proof, soft,
		strings.Join(phases, ", ")), nil
}

// memoryNaive keeps the whole inventory in memory and re-derives every object's verdict in process: the
// "everything in RAM" daemon the naive design implies.
func memoryNaive(ctx context.Context, o *options) (string, error) {
	p, err := pgxpool.New(ctx, o.databaseURL)
	if err != nil {
		return "", err
	}
	defer p.Close()
	type coll struct{ coverage, scope string }
	type profile struct {
		risk, privacy string
		required      bool
	}
	colls := map[string]coll{}
	profiles := map[string]profile{}
	rows, err := p.Query(ctx, `SELECT collection_name, coalesce(coverage_status, ''), coalesce(scope_class, '') FROM collection_registry`)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var n string
		var c coll
		if err := rows.Scan(&n, &c.coverage, &c.scope); err != nil {
			rows.Close()
			return "", err
		}
		colls[n] = c
	}
	rows.Close()
	rows, err = p.Query(ctx, `SELECT entity_type, coalesce(risk_class, ''), coalesce(privacy, ''), coalesce(coverage_required, false) FROM governance_coverage_profile`)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		var n string
		var pr profile
		if err := rows.Scan(&n, &pr.risk, &pr.privacy, &pr.required); err != nil {
			rows.Close()
			return "", err
		}
		profiles[n] = pr
	}
	rows.Close()
	type object struct{ class, coll, status, verdict string }
	objects := map[string]*object{}
	rows, err = p.Query(ctx, `SELECT entity_code, collection_name, entity_type, status FROM birth_registry`)
	if err != nil {
		return "", err
	}
	for rows.Next() {
		ob := &object{}
		var code string
		if err := rows.Scan(&code, &ob.coll, &ob.class, &ob.status); err != nil {
			rows.Close()
			return "", err
		}
		c, okc := colls[ob.coll]
		pr, okp := profiles[ob.class]
		switch {
		case !okc || !okp:
			ob.verdict = "needs_input"
		case ob.status == "retired" || ob.status == "superseded" || ob.status == "merged" || strings.HasPrefix(c.coverage, "BIRTH_EXEMPT_"):
			ob.verdict = "retired"
		case pr.privacy == "private" || pr.privacy == "user" || pr.privacy == "session" || c.scope == "USER_EXCLUDED":
			ob.verdict = "class_0"
		case c.scope == "FUTURE_SCOPE" || c.scope == "ORPHAN_REGISTRY" || c.coverage == "BIRTH_DEFERRED_NEEDS_REVIEW":
			ob.verdict = "deferred_birth"
		case !pr.required:
			ob.verdict = "not_relevant"
		default:
			ob.verdict = "relevant"
		}
		objects[ob.coll+":"+code] = ob
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d objects held in memory with their verdicts", len(objects)), nil
}

// runMemoryChild re-executes this binary as a memory child on database db and returns its report.
func runMemoryChild(ctx context.Context, r *runner, mode, db string) (memReport, error) {
	exe, err := os.Executable()
	if err != nil {
		return memReport{}, err
	}
	args := []string{"-memory-child", mode, "-database-url", r.env.dsnFor(db)}
	if r.opts.coalesceWindow > 0 {
		args = append(args, "-coalesce-window", r.opts.coalesceWindow.String())
	}
	if r.opts.intakePoll > 0 {
		args = append(args, "-intake-poll", r.opts.intakePoll.String())
	}
	if r.opts.noReadAhead {
		args = append(args, "-no-read-ahead")
	}
	if r.opts.intakePage > 0 {
		args = append(args, "-intake-page", strconv.Itoa(r.opts.intakePage))
	}
	if r.opts.catchUpPage != 0 {
		args = append(args, "-catch-up-page", strconv.Itoa(r.opts.catchUpPage))
	}
	if r.opts.memoryLimit != 0 {
		args = append(args, "-memory-limit-mib", strconv.Itoa(r.opts.memoryLimit))
	}
	cmd := exec.CommandContext(ctx, exe, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return memReport{}, fmt.Errorf("memory child %s: %w: %s", mode, err, strings.TrimSpace(errOut.String()))
	}
	var rep memReport
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &rep); err != nil {
		return rep, fmt.Errorf("memory child %s output %q: %w", mode, out.String(), err)
	}
	return rep, nil
}

func benchMemory(ctx context.Context, r *runner) ([]row, error) {
	tmpl, err := r.env.worldDB(ctx, "memory", r.opts.births)
	defer r.env.dropLater(tmpl)
	if err != nil {
		return nil, err
	}
	var oursHWM, oursRSS, naiveHWM, naiveRSS []float64
	var detail, naiveDetail string
	for i := 0; i < r.opts.reps; i++ {
		if err := func() error {
			clone, err := r.env.createDB(ctx, "memory_rep", tmpl)
			if err != nil {
				return err
			}
			defer r.env.dropLater(clone)
			ours, err := runMemoryChild(ctx, r, "ours", clone)
			if err != nil {
				return err
			}
			naive, err := runMemoryChild(ctx, r, "naive", clone)
			if err != nil {
				return err
			}
			oursHWM, oursRSS = append(oursHWM, float64(ours.HWMKiB)/1024), append(oursRSS, float64(ours.RSSKiB)/1024)
			naiveHWM, naiveRSS = append(naiveHWM, float64(naive.HWMKiB)/1024), append(naiveRSS, float64(naive.RSSKiB)/1024)
			detail, naiveDetail = ours.Detail, naive.Detail
			r.log.Info("memory rep", "rep", i+1, "ours_peak_mib", oursHWM[i], "naive_peak_mib", naiveHWM[i])
			return nil
		}(); err != nil {
			return nil, err
		}
	}
	rows := []row{{
		Bench: "memory", Metric: fmt.Sprintf("peak RSS (VmHWM) at %s births", thousands(int64(r.opts.births))), Unit: "MiB", Better: lower,
		Ours: median(oursHWM), Naive: fptr(median(naiveHWM)), Target: &target{Op: "<=", Value: 200, Text: "≤ 200 MiB"}, Reps: r.opts.reps,
		OursSamples: oursHWM, NaiveSamples: naiveHWM,
		Note: "a fresh process per repetition on a fresh clone of the world: backfill + activation, API server, " + detail +
			"; naive: " + naiveDetail,
	}, {
		Bench: "memory", Metric: "RSS at the end (VmRSS)", Unit: "MiB", Better: lower,
		Ours: median(oursRSS), Naive: fptr(median(naiveRSS)), Reps: r.opts.reps, OursSamples: oursRSS, NaiveSamples: naiveRSS,
	}}
	if !r.opts.scale10m {
		return rows, nil
	}
	// The same daemon at ten times the births: its memory is O(groups), so it stays within 1.5× of the 1M figure.
	// One repetition (the world takes minutes to load); the naive baseline would hold ten million objects.
	const births10m = 10_000_000
	db, err := r.env.worldDB(ctx, "memory10m", births10m)
	defer r.env.dropLater(db)
	if err != nil {
		return nil, err
	}
	ours, err := runMemoryChild(ctx, r, "ours", db)
	if err != nil {
		return nil, err
	}
	peak := float64(ours.HWMKiB) / 1024
	limit := 1.5 * median(oursHWM)
	return append(rows, row{
		Bench: "memory", Metric: fmt.Sprintf("peak RSS (VmHWM) at %s births", thousands(births10m)), Unit: "MiB", Better: lower,
		Ours: peak, Target: &target{Op: "<=", Value: limit, Text: fmt.Sprintf("≤ 1.5× the %s-birth peak (%.0f MiB)",
			thousands(int64(r.opts.births)), limit)}, Reps: 1, OursSamples: []float64{peak}, Note: ours.Detail,
	}), nil
}
