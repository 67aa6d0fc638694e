package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/events"
	"gcos/gcostest"
	"gcos/gcostest/wait"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// TestTheLoopFromTheCLI works the loop a person works, first on the database path, then through a running daemon:
// subscribe, list, read, mute, resolve; bad input exits 2 and changes nothing; no self-approval by principal.
func TestTheLoopFromTheCLI(t *testing.T) {
	t.Parallel()
	// Announcements go out at once (no cooldown), so every transition is a notification here.
	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 9, Config: func(c *gcos.Config) { c.Events.Rules = nil }})
	dsn := pgtest.DSN(w.Pool)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "gcos.json")
	cfg := `{"principals": [
		{"name": "ops", "roles": ["reader", "operator", "approver"]},
		{"name": "appr", "roles": ["approver"]},
		{"name": "viewer", "roles": ["reader"]}],
	  "events": {"rules": []}}`
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	w.ActivateVocabulary(t, "appr")
	group := w.Strings(t, `SELECT min(group_key) FROM governance_group`)[0]
	raise := func(t *testing.T) int64 { // the subtest's t: a parent's FailNow from a subtest is refused
		t.Helper()
		id, err := w.Store.RaiseFinding(w.Ctx, gcos.Finding{Type: gcos.IssueCandidateStale, Subject: group, Group: group,
			Evidence: map[string]any{"group_key": group}})
		if err != nil {
			t.Fatal(err)
		}
		// Beside a running daemon the promotion role may be the daemon's at this instant (it promotes by itself):
		// promote when the role is free, which it is between two of the daemon's promotions.
		promoted := wait.Until(time.Minute, func() bool {
			_, err = events.New(w.Store).PromotePending(w.Ctx)
			return gcos.ErrorCode(err) != gcos.ECONFLICT
		})
		if !promoted || err != nil {
			t.Fatalf("promote the finding's announcement: %v", err)
		}
		return id
	}

	loop := func(t *testing.T, dataDir string, viaDaemon bool) {
		run := func(want int, args ...string) string {
			t.Helper()
			code, stdout, stderr := runGate(t, append([]string{"--database-url", dsn, "--data-dir", dataDir, "--config", cfgPath, "--verbose"}, args...)...)
			if code != want {
				t.Fatalf("gcos %v: exit %d, want %d\n%s\n%s", args, code, want, stdout, stderr)
			}
			if through := strings.Contains(stderr, "through the daemon's API"); through != viaDaemon {
				t.Fatalf("gcos %v: through the daemon %v, want %v\n%s", args, through, viaDaemon, stderr)
			}
			return stdout
		}
		run(0, "notifications", "subscribe", "--type", "governance.candidate.*", "--by", "ops")
		id := raise(t)
		ref := strconv.FormatInt(id, 10)
		var in events.NotificationInbox
		if err := json.Unmarshal([]byte(run(0, "notifications", "list", "--by", "ops", "--json")), &in); err != nil {
			t.Fatal(err)
		}
		if in.Recipient != "ops" || in.Unread < 1 {
			t.Fatalf("ops's inbox: %+v", in)
		}
		if out := run(0, "notifications", "list", "--by", "viewer"); !strings.Contains(out, "viewer: 0 unread") {
			t.Fatalf("viewer, not subscribed: %s", out)
		}
		run(exitUsage, "notifications", "read", "00000000-0000-0000-0000-000000000001", "--by", "ops")
		run(exitUsage, "notifications", "read", "--by", "ops")
		if out := run(0, "notifications", "read", "--all", "--by", "ops"); !strings.Contains(out, "marked read") {
			t.Fatalf("read --all: %s", out)
		}
		run(exitUsage, "notifications", "mute", "--finding", ref, "--by", "viewer") // a reader may not mute
		run(exitUsage, "notifications", "mute", "--type", "governance.nothing.*", "--by", "ops")
		run(exitUsage, "notifications", "mute", "--finding", "999999999", "--by", "ops")
		run(0, "notifications", "mute", "--finding", ref, "--by", "ops")
		run(exitUsage, "findings", "resolve", ref, "--by", "ops")                         // no reason
		run(exitUsage, "findings", "resolve", ref, "--reason", "fixed", "--by", "viewer") // no role
		run(exitUsage, "findings", "resolve", "999999999", "--reason", "fixed", "--by", "ops")
		run(exitUsage, "findings", "show", "999999999")
		run(0, "findings", "resolve", ref, "--reason", "fixed upstream", "--by", "ops")
		run(1, "findings", "resolve", ref, "--reason", "again", "--by", "ops") // not open: a conflict
		var d events.FindingDetail
		if err := json.Unmarshal([]byte(run(0, "findings", "show", ref, "--json")), &d); err != nil {
			t.Fatal(err)
		}
		if d.Status != "resolved" || len(d.Resolutions) == 0 || d.Resolutions[0].By != "ops" || d.Resolutions[0].Reason != "fixed upstream" ||
			d.Resolutions[0].Actor["os_user"] == nil {
			t.Fatalf("finding after resolve: %+v", d)
		}
		// It recurs: it reopens with its counts, and the mute keeps it from notifying ops.
		raise(t)
		if err := json.Unmarshal([]byte(run(0, "findings", "show", ref, "--json")), &d); err != nil {
			t.Fatal(err)
		}
		if d.Status != "open" || d.ReopenCount < 1 {
			t.Fatalf("recurring finding: %+v", d.FindingRow)
		}
		var after events.NotificationInbox // fresh: decoding into a used one would merge the payload maps
		if err := json.Unmarshal([]byte(run(0, "notifications", "list", "--by", "ops", "--json")), &after); err != nil {
			t.Fatal(err)
		}
		for _, n := range after.Notifications {
			if n.Event.Payload["coalesce_key"] == d.CoalesceKey {
				t.Fatalf("a muted finding notified ops: %+v", n)
			}
		}
		run(0, "notifications", "unmute", "--finding", ref, "--by", "ops")
		run(exitUsage, "notifications", "unmute", "--finding", ref, "--by", "ops") // no such mute any more
		run(0, "findings", "resolve", ref, "--reason", "closed for the next round", "--by", "ops")

		// No self-approval by principal: ops proposes and may not approve under any name; appr may.
		w.Exec(t, `INSERT INTO measurement_registry (measurement_id, law_code, method, source_query, target_query, severity)
			SELECT $1, min(law_code), 1, 'select 1', 'select 1', 'low' FROM law_jurisdiction`, "M-CLI-"+strconv.FormatBool(viaDaemon))
		var prop struct {
			Ruleset postgres.RulesetRow `json:"ruleset"`
		}
		if err := json.Unmarshal([]byte(run(0, "ruleset", "compute", "--by", "ops", "--json")), &prop); err != nil {
			t.Fatal(err)
		}
		v := prop.Ruleset.Version
		if prop.Ruleset.ProposedBy != "ops" {
			t.Fatalf("proposed by %q", prop.Ruleset.ProposedBy)
		}
		run(1, "ruleset", "activate", v, "--approval", "APR-CLI", "--by", "ops")             // self-approval
		run(exitUsage, "ruleset", "activate", v, "--approval", "APR-CLI", "--by", "viewer")  // no approver role
		run(exitUsage, "ruleset", "activate", v, "--approval", "APR-CLI", "--by", "mallory") // not a principal
		var act postgres.ActivationResult
		if err := json.Unmarshal([]byte(run(0, "ruleset", "activate", v, "--approval", "APR-CLI", "--by", "appr", "--json")), &act); err != nil {
			t.Fatal(err)
		}
		var detail map[string]any
		if err := w.Pool.QueryRow(w.Ctx, `SELECT alert_detail::jsonb FROM registry_changelog WHERE id = $1`, act.AuditID).Scan(&detail); err != nil {
			t.Fatal(err)
		}
		approver, _ := detail["approver"].(map[string]any)
		proposer, _ := detail["proposer"].(map[string]any)
		if approver["principal"] != "appr" || approver["os_user"] == nil || proposer["principal"] != "ops" {
			t.Fatalf("activation audit row: %v", detail)
		}
		w.Exec(t, `DELETE FROM event_subscription WHERE recipient_ref = 'ops'`)
	}

	t.Run("database", func(t *testing.T) { loop(t, t.TempDir(), false) })
	t.Run("daemon", func(t *testing.T) {
		startUp(t, "--database-url", dsn, "--data-dir", dir, "--config", cfgPath, "up", "--listen", "127.0.0.1:0")
		loop(t, dir, true)
	})
}
