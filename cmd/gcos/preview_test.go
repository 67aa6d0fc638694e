package main

import (
	"encoding/json"
	"strings"
	"testing"

	"gcos"
	"gcos/gcostest"
	"gcos/postgres/pgtest"
)

// TestPreviewCommand: `gcos preview` answers a revocation's flips from the database (text and --json), and refuses
// a request it cannot apply with exit 2, naming the problem.
func TestPreviewCommand(t *testing.T) {
	t.Parallel()
	w := gcostest.Ready(t, gcostest.Options{Births: 1500, Seed: 5})
	dsn := pgtest.DSN(w.Pool)
	var id string
	if err := w.Pool.QueryRow(w.Ctx, `SELECT min(id)::text FROM governance_object_ownership WHERE status = 'active'`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	body := `{"changes": [{"kind": "owner_revoke", "ownership_id": ` + id + `}]}`
	code, stdout, stderr := runGateIn(t, body, "--database-url", dsn, "preview", "--changes", "-", "--json")
	var rep gcos.PreviewReport
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil || code != 0 {
		t.Fatalf("preview --json: exit %d (%v)\n%s\n%s", code, err, stdout, stderr)
	}
	if rep.AffectedGroups == 0 || rep.Token == "" || len(rep.Changes) != 1 || rep.Action != gcos.ActionWrite {
		t.Fatalf("preview of ownership %s judged nothing: %+v", id, rep)
	}
	code, stdout, stderr = runGateIn(t, body, "--database-url", dsn, "preview", "--changes", "-", "--action", "read")
	if code != 0 || !strings.Contains(stdout, "read decisions that flip:") {
		t.Fatalf("preview text: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, bad := range []struct{ body, want string }{
		{`{"changes": [{"kind": "owner_fire", "ownership_id": 1}]}`, `unknown kind "owner_fire"`},
		{`{"changes": [{"kind": "owner_revoke", "ownership_id": 999999999}]}`, "ownership 999999999 is not in"},
		{`{"changes": [{"kind": "owner_revoke", "ownership_id": ` + id + `}, {"kind": "owner_move", "ownership_id": ` + id + `, "owner_ref": "x"}]}`, "both change ownership"},
		{`{"changes": []}`, "at least one change"},
		{`{"changes": [{"kind": "owner_revoke", "ownership_id": 1, "scope": "x"}]}`, "does not take scope"},
		{`{"change": []}`, "unknown field"},
		{`not json`, "--changes -"},
	} {
		code, _, stderr := runGateIn(t, bad.body, "--database-url", dsn, "preview", "--changes", "-")
		if code != exitUsage || !strings.Contains(stderr, bad.want) {
			t.Errorf("preview %s: exit %d, stderr %q; want exit 2 naming %q", bad.body, code, stderr, bad.want)
		}
	}
	if code, _, stderr := runGate(t, "--database-url", dsn, "preview"); code != exitUsage || !strings.Contains(stderr, "--changes") {
		t.Errorf("preview without --changes: exit %d, %q", code, stderr)
	}
}
