package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"gcos"
	"gcos/client"
	"gcos/gate"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/httpapi"
)

// TestOutage_BackOffLogOnceReadiness runs `gcos up` through a PostgreSQL outage: /readyz turns 503 naming the
// database and back to 200 after; every loop backs off and logs the outage once per state change (down, still
// down, recovered) instead of once per try; and a daemon started while the database is down waits for it instead
// of exiting.
func TestOutage_BackOffLogOnceReadiness(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and stops PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	bin := buildGCOS(ctx, t, dir)
	db := newPrivateDB(ctx, t, filepath.Join(dir, "pg"), "gcos_outage")

	conf := gcos.DefaultConfig()
	conf.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
	conf.Intake.HeartbeatInterval = gcos.Duration(500 * time.Millisecond)
	conf.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond) // the event loop tries every 50 ms
	conf.Scan.IncrementalInterval = gcos.Duration(200 * time.Millisecond)
	conf.Scan.FullAuditInterval = gcos.Duration(time.Second)
	conf.Roles.LeaseTTL = gcos.Duration(time.Second)
	conf.Outage = gcos.OutageConfig{BackoffMax: gcos.Duration(time.Second), LogEvery: gcos.Duration(3 * time.Second)}
	confPath := writeConfig(t, dir, conf)
	store := db.seedWorld(ctx, t, conf, 500, 3)
	objects := (&gcostest.World{Ctx: ctx, Pool: db.pool, Store: store}).Strings(t,
		`SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id`)

	up := func(name string) (*exec.Cmd, string) {
		log := filepath.Join(dir, name+".log")
		f, err := os.Create(log)
		if err != nil {
			t.Fatal(err)
		}
		// A data dir of its own (`gcos up` claims its data dir), inside the test's dir, not the source tree.
		cmd := exec.Command(bin, "up", "--database-url", db.dsn, "--config", confPath, "--data-dir", filepath.Join(dir, name),
			"--listen", "127.0.0.1:0", "--insecure-no-auth")
		cmd.Stdout, cmd.Stderr = f, f
		cmd.Dir = dir
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = f.Close() })
		return cmd, log
	}
	read := func(log string) string {
		b, _ := os.ReadFile(log)
		return string(b)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, name := range []string{"first", "second"} {
				t.Logf("%s daemon's log:\n%s", name, read(filepath.Join(dir, name+".log")))
			}
		}
	})
	listenAt := regexp.MustCompile(`msg="gcos up" listen=(http://\S+)`)
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		wait.For(t, 90*time.Second, what, cond)
	}
	readyz := func(base string) (int, httpapi.Readiness) {
		var r httpapi.Readiness
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return 0, r
		}
		defer resp.Body.Close()
		_ = json.NewDecoder(resp.Body).Decode(&r)
		return resp.StatusCode, r
	}

	first, log := up("first")
	var base string
	waitFor("the daemon serves", func() bool {
		m := listenAt.FindStringSubmatch(read(log))
		if m != nil {
			base = m[1]
		}
		return m != nil
	})
	waitFor("/readyz answers 200", func() bool { code, _ := readyz(base); return code == 200 })
	// A pipeline's client: it asks once per call (no retries), within a second.
	gc, err := client.New(base, client.WithRetries(0), client.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ask := func(object string) client.Answer { return gc.Gate(ctx, object, gcos.ActionWrite) }
	var batch []gcos.GateCheck
	for _, o := range objects[:50] {
		batch = append(batch, gcos.GateCheck{Object: o})
	}
	// An object the gate allows from its view before the outage.
	var allowed string
	waitFor("the gate's view allows an object", func() bool {
		for _, o := range objects {
			if r := ask(o); r.Decision == gcos.GateAllow && r.Source == gate.SourceView {
				allowed = o
				return true
			}
		}
		return false
	})
	// Through the outage a caller keeps asking: once the view is past its bound after the database stopped, every
	// answer is a block read through to the database, never an allow from memory.
	var stopped atomic.Int64 // ns since epoch when the database had stopped; 0 before
	epoch := time.Now()
	asking, stopAsking := context.WithCancel(ctx)
	var outageAnswers, breaches atomic.Int64
	var breach atomic.Value
	askingDone := make(chan struct{})
	go func() {
		defer close(askingDone)
		for asking.Err() == nil {
			start := time.Since(epoch)
			r := ask(allowed)
			b := gc.GateBatch(ctx, batch)
			if at := stopped.Load(); at != 0 && int64(start) > at+int64(conf.Gate.MaxStaleness.Duration()) {
				outageAnswers.Add(1)
				if r.Decision != gcos.GateBlock || r.Source == gate.SourceView {
					breaches.Add(1)
					breach.CompareAndSwap(nil, fmt.Sprintf("%s from %q, %s after the database stopped", r.Decision, r.Source, start-time.Duration(at)))
				}
				if b.Allowed > 0 || b.Decision != gcos.GateBlock || b.Source == gate.SourceView {
					breaches.Add(1)
					breach.CompareAndSwap(nil, fmt.Sprintf("a batch: %s (%d allowed) from %q, %s after the database stopped", b.Decision, b.Allowed, b.Source, start-time.Duration(at)))
				}
			}
			wait.Pace(asking, 10*time.Millisecond) // a pipeline's pace
		}
	}()

	// The outage.
	before := len(read(log))
	if err := db.stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped.Store(int64(time.Since(epoch)))
	var notReady httpapi.Readiness
	waitFor("/readyz answers 503 while the database is down", func() bool {
		code, r := readyz(base)
		notReady = r
		return code == 503
	})
	if notReady.Checks["database"] == "ok" {
		t.Errorf("/readyz during the outage does not name the database: %+v", notReady)
	}
	// A daemon started now waits for the database instead of exiting.
	second, log2 := up("second")
	waitFor("the second daemon says it cannot reach the database", func() bool {
		return strings.Contains(read(log2), "connect to the database failed; retrying")
	})
	wait.Pass(ctx, 8*time.Second) // the outage lasts; loops that retried every 50 ms would log hundreds of lines
	stopAsking()
	<-askingDone
	if n := breaches.Load(); n > 0 {
		t.Errorf("%d of %d gate answers during the outage were not a block read through: the first, %s", n, outageAnswers.Load(), breach.Load())
	}
	if outageAnswers.Load() == 0 {
		t.Error("no gate answer was asked for during the outage")
	}
	if err := db.start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor("/readyz answers 200 after the outage", func() bool { code, _ := readyz(base); return code == 200 })
	waitFor("the second daemon comes up once the database is back", func() bool { return listenAt.MatchString(read(log2)) })
	for name, cmd := range map[string]*exec.Cmd{"first": first, "second": second} {
		if cmd.ProcessState != nil {
			t.Errorf("the %s daemon exited: %v", name, cmd.ProcessState)
		}
	}
	waitFor("the first daemon logs its recoveries", func() bool { return strings.Contains(read(log)[before:], " recovered") })

	outage := read(log)[before:]
	var loud []string
	for _, line := range strings.Split(outage, "\n") {
		if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			loud = append(loud, line)
		}
	}
	downs := strings.Count(outage, "failed; retrying with back-off")
	t.Logf("the outage (~10 s) logged %d warnings or errors, %d outage starts, %d reminders, %d recoveries",
		len(loud), downs, strings.Count(outage, "still failing"), strings.Count(outage, " recovered"))
	// About eight loops, each: one line when it fails, a reminder every 3 s, one recovery (at info).
	if len(loud) > 50 {
		t.Errorf("the outage logged %d warnings or errors; want a few per loop:\n%s", len(loud), strings.Join(loud, "\n"))
	}
	if downs == 0 {
		t.Errorf("no loop said it was failing:\n%s", outage)
	}
}
