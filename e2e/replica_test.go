package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/embeddedpg"
	"gcos/gate"
	"gcos/gcostest/wait"
	"gcos/httpapi"
	"gcos/postgres"
)

// TestReplicaReads_GateReadsReplicaWithinBound gives the store a streaming replica: the gate's read-through and the
// API's read-only routes read from it while its measured lag is within gate.max_staleness, with the primary's
// answers; when the replica stops replaying (pg_wal_replay_pause) and the primary moves on, they read the primary,
// so a birth the replica has not seen is known; once replay resumes, the gate is back on the replica.
func TestReplicaReads_GateReadsReplicaWithinBound(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir := t.TempDir()
	primary := newPrivateDBWith(ctx, t, embeddedpg.Config{DataDir: filepath.Join(dir, "primary"), Ephemeral: true,
		Settings: map[string]string{"synchronous_commit": "on"}}, "gcos_replica")
	replica, err := primary.cluster.StartReplica(ctx, embeddedpg.Config{DataDir: filepath.Join(dir, "replica"), Ephemeral: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Stop(context.Background()) })
	conf := gcos.DefaultConfig()
	conf.Gate.View = false // every question reads through
	conf.Gate.MaxStaleness = gcos.Duration(time.Second)
	conf.Gate.ViewRefresh = gcos.Duration(20 * time.Millisecond)
	primary.seedWorld(ctx, t, conf, 2000, 41)
	store, err := postgres.Open(ctx, postgres.Databases{URL: primary.dsn, ReplicaURL: replica.DatabaseDSN("gcos_replica")}, conf, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	g := gate.New(store, nil)
	monCtx, stopMonitor := context.WithCancel(ctx)
	monitorDone := make(chan error, 1)
	go func() { monitorDone <- g.Run(monCtx) }()
	defer func() { stopMonitor(); <-monitorDone }()
	replicaPool := connect(ctx, t, replica.DatabaseDSN("gcos_replica"))

	rows, err := primary.pool.Query(ctx, `SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id LIMIT 40`)
	if err != nil {
		t.Fatal(err)
	}
	objects, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	var collection, entityType string
	if err := primary.pool.QueryRow(ctx, `SELECT collection_name, entity_type FROM birth_registry WHERE parent_code IS NULL ORDER BY id LIMIT 1`).Scan(&collection, &entityType); err != nil {
		t.Fatal(err)
	}
	waitSource := func(what, object, want string) gcos.GateAnswer {
		t.Helper()
		var a gcos.GateAnswer
		if !wait.Until(60*time.Second, func() bool { a = g.Gate(ctx, object, gcos.ActionRead).Answer(); return a.Source == want }) {
			t.Fatalf("%s: the gate never read from the %s within 60 s (last %+v, replica %+v)", what, want, a, g.ReplicaStats())
		}
		return a
	}

	// The read-only routes of the API over the same store.
	httpCfg := conf.HTTP
	httpCfg.InsecureNoAuth = true
	h, err := httpapi.New(httpapi.Config{Store: store, Gate: g, HTTP: httpCfg})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(h)
	defer api.Close()
	readRoute := func(path string) (string, string) {
		t.Helper()
		resp, err := http.Get(api.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %v\n%s", path, resp.StatusCode, err, body)
		}
		return resp.Header.Get("X-GCOS-Source"), string(body)
	}
	routes := []string{"/v1/groups?limit=50", "/v1/explain?object=" + url.QueryEscape(objects[1]), "/v1/rulesets", "/v1/snapshots"}

	// Caught up: from the replica, answering as the primary does. Whether a given question finds the replica proven
	// fresh depends on the machine's load, so each is asked until the replica answers it.
	eventually := func(what string, ok func() bool) {
		t.Helper()
		if !wait.Until(60*time.Second, ok) {
			t.Fatalf("%s: not from the replica within 60 s (replica %+v)", what, g.ReplicaStats())
		}
	}
	waitSource("caught up", objects[0], gate.SourceReplica)
	for _, path := range routes {
		eventually("GET "+path, func() bool { src, _ := readRoute(path); return src == gate.SourceReplica })
	}
	var groupsFromReplica string
	eventually("GET /v1/groups", func() bool {
		var src string
		src, groupsFromReplica = readRoute("/v1/groups?limit=50")
		return src == gate.SourceReplica
	})
	groupsFromPrimary, err := store.ListGroups(ctx, postgres.GroupFilter{Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := json.Marshal(groupsFromPrimary); !jsonEqual(t, groupsFromReplica, string(want)) {
		t.Errorf("GET /v1/groups from the replica differs from the primary's page:\n%s\n%s", groupsFromReplica, want)
	}
	for _, o := range objects {
		var fromReplica gcos.GateAnswer
		eventually("gate "+o, func() bool {
			fromReplica = g.Gate(ctx, o, gcos.ActionWrite).Answer()
			return fromReplica.Source == gate.SourceReplica
		})
		fromPrimary := g.Decide(ctx, o, gcos.ActionWrite).Answer() // the primary's own read, as it is
		if fromReplica.Decision != fromPrimary.Decision || fromReplica.Reason != fromPrimary.Reason {
			t.Errorf("%s: the replica answers %+v, the primary %+v", o, fromReplica, fromPrimary)
		}
	}

	// Replay paused: the primary moves on, the replica's proof ages past the bound, the gate reads the primary.
	if _, err := replicaPool.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.pool.Exec(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status)
		VALUES ('after-pause', $1, $2, 'active')`, collection, entityType); err != nil {
		t.Fatal(err)
	}
	fresh := collection + ":after-pause"
	a := waitSource("replay paused", fresh, gate.SourceDatabase)
	if a.Decision == gcos.GateBlock && a.Reason == fmt.Sprintf("object %s has no birth in birth_registry: unknown objects are blocked", fresh) {
		t.Errorf("the gate answered from a state without the new birth: %+v", a)
	}
	if n := count(t, ctx, replicaPool, `SELECT count(*) FROM birth_registry WHERE entity_code = 'after-pause'`); n != 0 {
		t.Fatal("the paused replica has the new birth: the test proves nothing")
	}
	for range 20 { // not one answer from the paused replica
		if a := g.Gate(ctx, fresh, gcos.ActionRead).Answer(); a.Source == gate.SourceReplica {
			t.Fatalf("the gate read from a replica %v s behind (bound %s): %+v", g.ReplicaStats().LagSeconds, conf.Gate.MaxStaleness.Duration(), a)
		}
		for _, path := range routes {
			if src, _ := readRoute(path); src != gate.SourceDatabase {
				t.Fatalf("GET %s read from %q with the replica paused behind the bound", path, src)
			}
		}
	}
	if _, body := readRoute("/v1/explain?object=" + url.QueryEscape(fresh)); !strings.Contains(body, "after-pause") {
		t.Errorf("explain of the new birth with the replica paused: %s", body)
	}

	// Replay resumed: back on the replica, which now has the birth.
	if _, err := replicaPool.Exec(ctx, `SELECT pg_wal_replay_resume()`); err != nil {
		t.Fatal(err)
	}
	if a := waitSource("replay resumed", fresh, gate.SourceReplica); a.Reason == fmt.Sprintf("object %s has no birth in birth_registry: unknown objects are blocked", fresh) {
		t.Errorf("the resumed replica does not know the birth: %+v", a)
	}
	if st := g.ReplicaStats(); st.Reads == 0 || st.Fallbacks == 0 {
		t.Errorf("replica stats: %+v, want reads and fallbacks both counted", st)
	}
}

// jsonEqual compares two JSON documents by value.
func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	xs, _ := json.Marshal(x)
	ys, _ := json.Marshal(y)
	return string(xs) == string(ys)
}
