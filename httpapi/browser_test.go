package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"gcos"
	"gcos/daemon"
	"gcos/events"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/httpapi"
	"gcos/world"
)

var updateScreenshot = flag.Bool("update-screenshot", false, "write the dashboard's screenshot to docs/dashboard.png")

// chromium finds a headless-capable Chromium: GCOS_CHROMIUM, else the distribution's. Outside CI a machine without
// one skips the browser test (saying so); in CI (.ci/run installs Debian's chromium) a missing browser fails it.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("GCOS_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Chromium found (chromium, chromium-browser, google-chrome; or set GCOS_CHROMIUM): .ci/run installs Debian's chromium")
	}
	t.Skip("the dashboard's browser test needs Chromium: apt-get install chromium (or set GCOS_CHROMIUM)")
	return ""
}

// TestDashboardInABrowser loads the dashboard in headless Chromium against a running daemon: the page loads with no
// console error and no CSP violation, every panel fills, the numbers shown equal the API's answer of the same
// instant (as_of), a verdict change made through the API (a ruleset activation) appears in the live feed, and the
// layout fits 1280×800 and 1920×1080 without clipping.
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	exe := chromium(t)
	w := gcostest.Ready(t, gcostest.Options{Births: 3000, Seed: 21, Config: func(cfg *gcos.Config) {
		cfg.Intake.PollInterval = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.CoalesceWindow = gcos.Duration(20 * time.Millisecond)
		cfg.Scan.StormFraction = 1
		cfg.HTTP.OperatorTokens = []string{browserTestToken} // the test's own reads and the activation; the page signs in by its link
	}})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// The page is read while the demo's churn runs: births, change rows and governance edits, as `up --demo` makes.
	churn := &world.Churn{Pool: w.Pool, BirthsPerSecond: 5, ChangesPerSecond: 1, GovernancePerSecond: 2, Seed: 21}
	d, err := daemon.New(daemon.Config{Store: w.Store, Listener: ln, Version: "browser-test", Churn: churn})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	base := "http://" + ln.Addr().String()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 800))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(alloc)
	defer cancelBrowser()

	// Console errors and warnings, uncaught exceptions, and the browser log's entries (a CSP violation, a failed
	// load such as a missing favicon) all arrive on the console stream, subscribed before the page loads.
	var mu sync.Mutex
	var problems []string
	expected400 := 0 // the refusals the test asks for: the browser logs each failed load, and that is the answer
	consoleCtx, stopConsole := context.WithCancel(browser)
	defer stopConsole()
	messages := chromedp.Console(consoleCtx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.IsException() || m.Type == chromedp.ConsoleError || m.Type == chromedp.ConsoleWarning || m.Source == "security" {
				mu.Lock()
				if expected400 > 0 && strings.Contains(m.String(), "status of 400") {
					expected400--
				} else {
					problems = append(problems, m.String())
				}
				mu.Unlock()
			}
		}
	}()
	// The page opens with the one-time login link the daemon prints at start: it sets the session cookie (which the
	// page's script cannot read) and lands on the dashboard, the code gone from the address bar; the link then
	// works no more.
	loginLink, _, err := d.LoginLink()
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(browser, chromedp.Navigate(loginLink)); err != nil {
		t.Fatalf("open the login link: %v", err)
	}
	landed, err := chromedp.Run(browser, chromedp.Evaluate[[]string](`[location.href, document.cookie, document.body.dataset.auth]`))
	if err != nil {
		t.Fatal(err)
	}
	if landed[0] != base+"/" || strings.Contains(landed[1], "gcos_session") || landed[2] != "session" {
		t.Fatalf("after the login link: location %q, script-visible cookies %q, auth %q; want %q, no session cookie, session", landed[0], landed[1], landed[2], base+"/")
	}
	if resp, err := noRedirect.Get(loginLink); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the login link used a second time: %v %v, want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// Every panel fills: no "no data yet" placeholder is left, and the ledger and the feed of changes have rows.
	poll(t, browser, "every panel fills", `document.querySelectorAll('td.muted').length === 0 || !Array.from(document.querySelectorAll('td.muted')).some(td => td.textContent === 'no data yet')`)
	poll(t, browser, "the ledger has a row per scope", `document.querySelectorAll('#ledger-rows tr[data-scope]').length > 0`)
	// The live truth while it churns: every figure filled (the count of recent changes too), the sparklines drawn,
	// and no worker shown as ok beside a last run that failed.
	poll(t, browser, "the count of recent changes fills", `/^(\d+|500 or more)$/.test(document.querySelector('#changes-count').textContent)`)
	poll(t, browser, "the sparklines are drawn", `!!document.querySelector('#dirty-spark polyline') && !!document.querySelector('#lag-spark polyline')`)
	poll(t, browser, "workers show their state", `document.querySelectorAll('#worker-rows tr').length > 1 &&
		Array.from(document.querySelectorAll('#worker-rows tr')).every(tr => tr.cells.length < 5 ||
			!(tr.cells[1].textContent === 'ok' && tr.cells[4].textContent === 'error'))`)

	// The caller's unread count and a finding linked to its explanation: the dashboard reads as "local" (the login
	// link's session acts as the daemon's local caller), subscribed here to the candidate findings; a finding about a group opens.
	loop := events.New(w.Store)
	if _, err := loop.RegisterVocabulary(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := loop.ActivateEventType(ctx, "governance.candidate.unknown", "APR-BROWSER", "browser-approver"); err != nil {
		t.Fatal(err)
	}
	if _, err := loop.SubscribeAs(ctx, events.NotificationSelector{EventType: "governance.candidate.*"},
		gcos.Actor{Principal: "local", Via: gcos.ViaCLI}); err != nil {
		t.Fatal(err)
	}
	var groupKey string
	if err := w.Pool.QueryRow(ctx, `SELECT min(group_key) FROM governance_group`).Scan(&groupKey); err != nil {
		t.Fatal(err)
	}
	if _, err := w.Store.RaiseFinding(ctx, gcos.Finding{Type: gcos.IssueCandidateUnknown, Subject: groupKey, Group: groupKey,
		Evidence: map[string]any{"group_key": groupKey}}); err != nil {
		t.Fatal(err)
	}
	poll(t, browser, "the caller and its unread count show", `document.querySelector('#me-principal').textContent === 'local' &&
		Number(document.querySelector('#me-unread').dataset.unread) >= 1`)
	// The findings panel shows the newest findings, which the coverage detections keep opening while the world
	// churns: any finding about a group links to its explanation.
	link := `a[data-explain^="/v1/explain?group="]`
	poll(t, browser, "a finding links to its explanation", `!!document.querySelector('`+link+`')`)
	explained, err := chromedp.Run(browser, chromedp.Evaluate[string](`(() => { const a = document.querySelector('`+link+`'); a.click();
		return a.dataset.explain.slice('/v1/explain?group='.length); })()`))
	if err != nil {
		t.Fatal(err)
	}
	if !gcos.IsGroupKey(explained) {
		t.Fatalf("the link explains %q, not a group", explained)
	}
	poll(t, browser, "the explanation shows", `document.querySelector('#explain-view').textContent.includes('`+explained+`') &&
		!document.querySelector('#explain-view').textContent.includes('loading')`)

	// The preview form: a change naming a row that does not exist is refused with the API's reason; a collection made
	// exempt flips its blocked high-risk objects to allow, named on the page.
	var exempt string
	if err := w.Pool.QueryRow(ctx, `SELECT source_registry FROM v_candidate_effective WHERE coverage_outcome = 'orphan'
		AND risk_class <> 'read_descriptive' ORDER BY group_key LIMIT 1`).Scan(&exempt); err != nil {
		t.Fatal(err)
	}
	submit := func(kind string, fields map[string]string) {
		t.Helper()
		js, _ := json.Marshal(fields)
		if _, err := chromedp.Run(browser, chromedp.Evaluate[bool](`(() => {
			const f = document.querySelector('#preview-form'), k = document.querySelector('#preview-kind');
			k.value = '`+kind+`'; k.dispatchEvent(new Event('change'));
			for (const [n, v] of Object.entries(`+string(js)+`)) { f.elements[n].value = v; }
			f.requestSubmit(); return true; })()`)); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	expected400++
	mu.Unlock()
	submit("owner_revoke", map[string]string{"ownership_id": "999999999"})
	poll(t, browser, "a preview of a row that does not exist is refused", `document.querySelector('#preview-summary').textContent.startsWith('refused: ') &&
		document.querySelector('#preview-summary').textContent.includes('ownership 999999999')`)
	submit("coverage_status", map[string]string{"collection": exempt, "coverage_status": "BIRTH_EXEMPT_SYSTEM"})
	poll(t, browser, "the preview shows its flips", `Number(document.querySelector('#preview-summary').dataset.blockToAllow) > 0 &&
		document.querySelectorAll('#preview-flips tr[data-object]').length > 0 &&
		Array.from(document.querySelectorAll('#preview-flips tr[data-object]')).every(tr => tr.dataset.object.startsWith('`+exempt+`:')) &&
		document.querySelectorAll('#preview-ledgers tr').length > 0`)

	// The numbers shown equal the API's at the same instant: the summary's verdict table and the ledger.
	sameInstant(t, browser, base+"/v1/summary", "#summary-asof", func(body []byte) (map[string]string, string) {
		var sum struct {
			Verdicts map[string]struct {
				Groups  int64 `json:"groups"`
				Objects int64 `json:"objects"`
			} `json:"verdicts"`
		}
		if err := json.Unmarshal(body, &sum); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for v, n := range sum.Verdicts {
			want[v] = fmt.Sprintf("%d|%d", n.Groups, n.Objects)
		}
		return want, `Object.fromEntries(Array.from(document.querySelectorAll('#verdict-rows tr')).map(tr =>
			[tr.cells[0].textContent, tr.cells[1].textContent.replaceAll(',', '') + '|' + tr.cells[2].textContent.replaceAll(',', '')]))`
	})
	sameInstant(t, browser, base+"/v1/invariant", "#ledger-asof", func(body []byte) (map[string]string, string) {
		var inv httpapi.InvariantView
		if err := json.Unmarshal(body, &inv); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{}
		for _, l := range inv.Ledgers {
			want[l.Scope] = fmt.Sprintf("%d|%d|%d|%d", l.Total, l.Covered, l.Stale, l.Uncounted)
		}
		return want, `Object.fromEntries(Array.from(document.querySelectorAll('#ledger-rows tr[data-scope]')).map(tr => {
			const c = n => tr.querySelector('td[data-col="' + n + '"]').textContent.replaceAll(',', '');
			return [tr.dataset.scope, [c('total'), c('covered'), c('stale'), c('uncounted')].join('|')];
		}))`
	})

	// A verdict change made through the API appears in the live feed: a rule edit proposed as one actor, activated
	// over HTTP by another, re-scanned by the daemon.
	var before int64
	if err := w.Pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM gcos_verdict_change`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	w.Exec(t, `UPDATE governance_coverage_profile SET coverage_required = NOT coalesce(coverage_required, true)
		WHERE entity_type = (SELECT object_class FROM v_candidate_effective WHERE candidate_verdict = 'relevant'
		                     GROUP BY object_class ORDER BY count(*) DESC, object_class LIMIT 1)`)
	rs, _, err := w.Store.ComputeRuleset(ctx, "browser-proposer")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(httpapi.ActivateRequest{ApprovalRef: "APR-BROWSER", Actor: "browser-approver"})
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/rulesets/"+rs.Version+"/activate", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := authed(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("activate %s over HTTP: %s", rs.Version, resp.Status)
	}
	// The page shows the newest 25 changes, and the activation's re-scan (and the churn) may make more than 25 before
	// the page's next read; so the page must show some change made under the activated ruleset, not one given id.
	pollUntil(t, "the activation's change appears on the page", func() bool {
		shown, err := chromedp.Run(browser, chromedp.Evaluate[[]int64](
			`Array.from(document.querySelectorAll('#change-rows tr[data-change]')).map(tr => Number(tr.dataset.change))`))
		if err != nil || len(shown) == 0 {
			return false
		}
		var n int
		err = w.Pool.QueryRow(ctx, `SELECT count(*) FROM gcos_verdict_change WHERE id = ANY($1) AND id > $2 AND ruleset_version = $3`,
			shown, before, rs.Version).Scan(&n)
		return err == nil && n > 0
	})

	// The layout fits: nothing is clipped or scrolls sideways, at both sizes; the screenshot is of the larger.
	for _, size := range [][2]int64{{1280, 800}, {1920, 1080}} {
		if err := chromedp.Do(browser, chromedp.EmulateViewport(size[0], size[1])); err != nil {
			t.Fatal(err)
		}
		poll(t, browser, fmt.Sprintf("nothing clipped at %d×%d", size[0], size[1]), `window.innerWidth === `+fmt.Sprint(size[0])+` &&
			document.documentElement.scrollWidth <= document.documentElement.clientWidth &&
			Array.from(document.querySelectorAll('section')).every(s => s.scrollWidth <= s.clientWidth + 1)`)
	}
	png, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "dashboard.png")
	if *updateScreenshot {
		out = filepath.Join("..", "docs", "dashboard.png")
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", out)

	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the browser reported:\n%s", strings.Join(problems, "\n"))
	}
}

// browserTestToken is the operator token the browser test's own requests carry.
const browserTestToken = "browser-test-operator-token"

// authed sends req with the browser test's token.
func authed(req *http.Request) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+browserTestToken)
	return http.DefaultClient.Do(req)
}

// noRedirect is a client that shows a redirect instead of following it.
var noRedirect = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

// poll evaluates expr in the page until it is true, with a generous deadline (it never measures how long it took).
func poll(t *testing.T, browser context.Context, what, expr string) {
	t.Helper()
	pollUntil(t, what, func() bool {
		ok, err := chromedp.Run(browser, chromedp.Evaluate[bool](expr))
		return err == nil && ok
	})
}

func pollUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	wait.For(t, 90*time.Second, what, cond)
}

// sameInstant waits until the page shows the API's answer from url at the same as_of, then compares the numbers:
// want is the API's, shown the page's (a JavaScript expression evaluating to an object of the same keys).
func sameInstant(t *testing.T, browser context.Context, url, asOfSel string, read func(body []byte) (want map[string]string, shown string)) {
	t.Helper()
	var want, got map[string]string
	var apiAsOf, pageAsOf string
	pollUntil(t, "the page and "+url+" at one instant", func() bool {
		req, _ := http.NewRequest(http.MethodGet, url, nil)
		resp, err := authed(req)
		if err != nil {
			return false
		}
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		resp.Body.Close()
		var head struct {
			AsOf string `json:"as_of"`
		}
		if json.Unmarshal(buf.Bytes(), &head) != nil {
			return false
		}
		var shown string
		want, shown = read(buf.Bytes())
		// One evaluation reads the instant and the numbers together: the page cannot repaint in between.
		res, err := chromedp.Run(browser, chromedp.Evaluate[struct {
			AsOf    string            `json:"asOf"`
			Numbers map[string]string `json:"numbers"`
		}](`({asOf: document.querySelector('`+asOfSel+`').dataset.asof, numbers: `+shown+`})`))
		pageAsOf, got, apiAsOf = res.AsOf, res.Numbers, head.AsOf
		return err == nil && pageAsOf == apiAsOf
	})
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s at %s: %s shows %q, the API says %q", url, apiAsOf, k, got[k], v)
		}
	}
}
