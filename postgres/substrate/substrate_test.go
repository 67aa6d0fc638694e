package substrate_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"gcos/postgres/pgtest"
	"gcos/postgres/substrate"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func tableDigest(t *testing.T, pool *pgxpool.Pool, table string) string {
	t.Helper()
	var d string
	err := pool.QueryRow(context.Background(), `
		SELECT md5(
			(SELECT string_agg(column_name || ':' || data_type || ':' || is_nullable || ':' || coalesce(column_default,''), ',' ORDER BY ordinal_position)
			 FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1) ||
			(SELECT coalesce(string_agg(indexdef, ',' ORDER BY indexdef), '') FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1) ||
			(SELECT coalesce(string_agg(tgname, ',' ORDER BY tgname), '') FROM pg_trigger WHERE tgrelid = $1::regclass AND NOT tgisinternal) ||
			(SELECT coalesce(string_agg(b::text, ',' ORDER BY b::text), '') FROM birth_registry b))`, table).Scan(&d)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestCreateLeavesExistingTableByteIdentical(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewEmptyDB(t)
	// An organisation's birth_registry with extra columns, a different index set and rows.
	_, err := pool.Exec(ctx, `
		CREATE TABLE birth_registry (
			id bigint PRIMARY KEY, entity_code text NOT NULL, collection_name text NOT NULL, entity_type text NOT NULL,
			status text NOT NULL, born_at timestamptz NOT NULL, canonical_address text, parent_code text,
			source_system text, actor_ref text, legacy_flag int DEFAULT 7, notes text);
		INSERT INTO birth_registry VALUES (1, 'a', 'c', 't', 'active', now(), NULL, NULL, 's', 'x', 3, 'keep me'),
		                                  (2, 'b', 'c', 't', 'retired', now(), NULL, NULL, 's', 'x', DEFAULT, NULL);`)
	if err != nil {
		t.Fatal(err)
	}
	before := tableDigest(t, pool, "birth_registry")
	created, err := substrate.Create(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range created {
		if name == "birth_registry" {
			t.Fatal("Create re-created an existing table")
		}
	}
	if after := tableDigest(t, pool, "birth_registry"); after != before {
		t.Fatal("birth_registry changed")
	}
	again, err := substrate.Create(ctx, pool)
	if err != nil || len(again) != 0 {
		t.Fatalf("second Create created %v (err %v)", again, err)
	}
	rep, err := substrate.Verify(ctx, pool, substrate.Tables)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify: %v", rep.Err())
	}
	// The organisation's table lacks the (born_at, id) and (collection_name, entity_code) indexes: reported, not made.
	joined := strings.Join(rep.MissingIndexes, "\n")
	if !strings.Contains(joined, `CREATE INDEX CONCURRENTLY "birth_registry_born_at_id_idx" ON "birth_registry" ("born_at", "id");`) ||
		!strings.Contains(joined, `CREATE UNIQUE INDEX CONCURRENTLY`) {
		t.Fatalf("missing index report = %q", joined)
	}
}

func TestVerifyNamesEveryMissingColumn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.NewEmptyDB(t)
	if _, err := substrate.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	rep, err := substrate.Verify(ctx, pool, substrate.Tables)
	if err != nil || !rep.OK() || len(rep.MissingIndexes) != 0 || len(rep.AbsentOptional) != 0 {
		t.Fatalf("greenfield substrate does not verify cleanly: %+v %v", rep, err)
	}
	if _, err := pool.Exec(ctx, `ALTER TABLE birth_registry DROP COLUMN parent_code; ALTER TABLE registry_changelog DROP COLUMN alert_level; DROP TABLE governance_exception`); err != nil {
		t.Fatal(err)
	}
	rep, err = substrate.Verify(ctx, pool, substrate.Tables)
	if err != nil {
		t.Fatal(err)
	}
	msg := rep.Err()
	if msg == nil {
		t.Fatal("missing columns accepted")
	}
	for _, want := range []string{"birth_registry.parent_code", "registry_changelog.alert_level"} {
		if !strings.Contains(msg.Error(), want) {
			t.Errorf("error %q does not name %s", msg, want)
		}
	}
	if len(rep.AbsentOptional) != 1 || rep.AbsentOptional[0] != "governance_exception" {
		t.Errorf("absent optional = %v, want [governance_exception]", rep.AbsentOptional)
	}
}
