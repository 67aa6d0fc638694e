// Package substrate knows the organisation's existing tables that GCOS reuses (SPEC §3.1): it creates them on a
// greenfield database (only when absent) and verifies, on an existing one, that every column GCOS relies on is
// there. It never alters a substrate table and never creates an index on one that already exists.
package substrate

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
)

//go:embed tables.sql
var tablesSQL string

// lockKey serialises substrate creation with migrations' own lock domain kept separate.
const lockKey int64 = 0x67636f735f737562 // "gcos_sub"

// Table describes one substrate table: the columns GCOS relies on and whether GCOS can run without it.
type Table struct {
	Name     string
	Columns  []string
	Optional bool // absent ⇒ the dimension degrades and the ruleset hashes an absent marker
	Indexes  []Index
}

// Index is an index GCOS relies on for speed; when missing it is reported with the statement to run.
type Index struct {
	Name    string
	Columns []string
	Unique  bool
}

// CreateStatement is the statement an operator runs to add the index without blocking writers.
func (i Index) CreateStatement(table string) string {
	u := ""
	if i.Unique {
		u = "UNIQUE "
	}
	cols := make([]string, len(i.Columns))
	for k, c := range i.Columns {
		cols[k] = pgx.Identifier{c}.Sanitize()
	}
	return fmt.Sprintf("CREATE %sINDEX CONCURRENTLY %s ON %s (%s);", u, pgx.Identifier{i.Name}.Sanitize(),
		pgx.Identifier{table}.Sanitize(), strings.Join(cols, ", "))
}

// Tables lists every substrate table GCOS reads or writes.
var Tables = []Table{
	{Name: "birth_registry", Columns: []string{"id", "entity_code", "collection_name", "entity_type", "status", "born_at", "canonical_address", "parent_code", "source_system", "actor_ref"},
		Indexes: []Index{{Name: "birth_registry_born_at_id_idx", Columns: []string{"born_at", "id"}}, {Name: "birth_registry_collection_code_key", Columns: []string{"collection_name", "entity_code"}, Unique: true}}},
	{Name: "registry_changelog", Columns: []string{"id", "entity_type", "entity_code", "action", "timestamp", "alert_level", "resolved", "changed_by", "alert_detail"},
		Indexes: []Index{{Name: "registry_changelog_timestamp_id_idx", Columns: []string{"timestamp", "id"}}}},
	{Name: "collection_registry", Columns: []string{"collection_name", "coverage_status", "scope_class"}},
	{Name: "meta_catalog", Columns: []string{"entity_type", "registry_collection"}},
	{Name: "measurement_registry", Columns: []string{"measurement_id", "measurement_name", "law_code", "method", "source_query", "target_query", "comparison", "severity", "enabled", "auto_generated"}},
	{Name: "pivot_definitions", Columns: []string{"pivot_code", "axis_family", "entity_type"}, Optional: true},
	{Name: "law_jurisdiction", Columns: []string{"law_code", "scope_code", "entity_type", "collection_name"}, Optional: true},
	{Name: "normative_registry", Optional: true},
	{Name: "law_catalog", Optional: true},
	{Name: "governance_docs", Optional: true},
	{Name: "evolution_snapshots", Columns: []string{"id", "snapshot_at", "scope", "metrics", "delta_previous", "notes"}},
	{Name: "system_issues", Columns: []string{"id", "issue_type", "severity", "coalesce_key", "occurrence_count", "reopen_count", "business_logic_hash", "violation_hash", "run_id", "parent_issue_id", "evidence_snapshot", "status", "first_seen_at", "last_seen_at", "resolved_at"}},
	{Name: "event_type_registry", Columns: []string{"event_domain", "event_type", "event_stream", "delivery_lane", "default_severity", "description", "active", "created_at"}},
	{Name: "event_outbox", Columns: []string{"id", "event_domain", "event_type", "event_stream", "delivery_lane", "event_severity", "event_subject_table", "event_subject_ref", "canonical_address", "actor_ref", "source_system", "correlation_id", "payload_classification", "safe_payload", "occurred_at", "created_at"}},
	{Name: "event_pending", Columns: []string{"id", "event_domain", "event_type_hint", "entity_table", "entity_ref", "canonical_address", "actor_ref", "capture_payload", "processed_at", "error_count", "last_error", "next_attempt_at", "dead_lettered_at"}},
	{Name: "event_subscription", Columns: []string{"id", "recipient_ref", "event_domain", "event_type", "event_stream", "scope_filter", "mute"}},
	{Name: "event_read", Columns: []string{"event_id", "actor_ref", "read_at", "read_status_source"}},
	{Name: "queue_heartbeat", Columns: []string{"executor_name", "executor_kind", "last_tick_at", "last_tick_status", "lease_owner", "lease_expires_at"}},
	{Name: "iu_route_worker_cursor", Optional: true},
	{Name: "governance_coverage_profile", Columns: []string{"entity_type", "risk_class", "coverage_required", "privacy", "independently_authoritative", "write_path"}, Optional: true},
	{Name: "governance_responsibility_scope", Columns: []string{"scope_code", "default_owner_hint"}, Optional: true},
	{Name: "governance_object_ownership", Columns: []string{"id", "scope_code", "entity_type", "collection_name", "owner_ref", "status"}, Optional: true},
	{Name: "governance_exception", Columns: []string{"exception_id", "scope_code", "entity_type", "collection_name", "entity_code", "approval_ref", "expires_at", "fingerprint", "status"}, Optional: true},
}

// Bound is Tables as the source binding names them: the births and the governance registries it binds are
// verified under the bound table and column names (an index on the births by its bound columns), the other tables
// under their own. Create still creates the default names: a renamed binding points at tables that exist.
func Bound(sb gcos.SourceBinding) []Table {
	b := sb.Birth
	renames := map[string]struct {
		table   string
		columns map[string]string
	}{
		"birth_registry": {b.Table, map[string]string{
			"id": b.ID, "entity_code": b.EntityCode, "collection_name": sb.SourceRegistry.Column,
			"entity_type": sb.ObjectClass.Column, "status": sb.LifecycleStatus.Column, "born_at": b.BornAt,
			"canonical_address": b.CanonicalAddress, "parent_code": b.ParentCode, "source_system": b.SourceSystem,
			"actor_ref": b.ActorRef}},
		gcos.TablePivots: {sb.AxisFamily.Table, map[string]string{
			"axis_family": sb.AxisFamily.Column, "entity_type": sb.AxisFamily.KeyColumn}},
		gcos.TableScopes:    {sb.Scope.Table, map[string]string{"scope_code": sb.Scope.Column}},
		gcos.TableOwnership: {sb.OwnerScope.Table, map[string]string{"owner_ref": sb.OwnerScope.Column}},
	}
	column := func(cols map[string]string, c string) string {
		if bound := cols[c]; bound != "" {
			return bound
		}
		return c
	}
	out := make([]Table, len(Tables))
	for i, t := range Tables {
		r, ok := renames[t.Name]
		if !ok {
			out[i] = t
			continue
		}
		bt := Table{Name: cmp.Or(r.table, t.Name), Optional: t.Optional}
		for _, c := range t.Columns {
			bt.Columns = append(bt.Columns, column(r.columns, c))
		}
		for _, ix := range t.Indexes {
			bix := Index{Name: ix.Name, Unique: ix.Unique}
			for _, c := range ix.Columns {
				bix.Columns = append(bix.Columns, column(r.columns, c))
			}
			bt.Indexes = append(bt.Indexes, bix)
		}
		out[i] = bt
	}
	return out
}

// ddl splits tables.sql into one block per table.
func ddl() (map[string]string, error) {
	out := map[string]string{}
	var name string
	var b strings.Builder
	flush := func() {
		if name != "" {
			out[name] = b.String()
		}
		b.Reset()
	}
	for _, line := range strings.Split(tablesSQL, "\n") {
		if rest, ok := strings.CutPrefix(line, "-- table: "); ok {
			flush()
			name = strings.TrimSpace(rest)
			continue
		}
		b.WriteString(line)
		b.WriteByte('\n')
	}
	flush()
	for _, t := range Tables {
		if _, ok := out[t.Name]; !ok {
			return nil, fmt.Errorf("substrate DDL has no block for %s", t.Name)
		}
	}
	return out, nil
}

// Create creates every absent substrate table (with its indexes) in one transaction and returns the names it
// created. Tables that exist are left exactly as they are.
func Create(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	blocks, err := ddl()
	if err != nil {
		return nil, err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("create substrate: %w", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockKey); err != nil {
		return nil, fmt.Errorf("create substrate: lock: %w", err)
	}
	present, err := existing(ctx, tx)
	if err != nil {
		return nil, err
	}
	var created []string
	for _, t := range Tables {
		if present[t.Name] {
			continue
		}
		if _, err := tx.Exec(ctx, blocks[t.Name]); err != nil {
			return nil, fmt.Errorf("create substrate table %s: %w", t.Name, err)
		}
		created = append(created, t.Name)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("create substrate: commit: %w", err)
	}
	return created, nil
}

// Report is the result of verifying an existing substrate.
type Report struct {
	Missing        []string `json:"missing"`         // "table" or "table.column" GCOS cannot run without
	AbsentOptional []string `json:"absent_optional"` // optional registries that are absent (dimensions degrade)
	MissingIndexes []string `json:"missing_indexes"` // CREATE INDEX CONCURRENTLY statements for the operator
}

// OK reports whether GCOS can start.
func (r Report) OK() bool { return len(r.Missing) == 0 }

// Err names every missing table and column, or returns nil.
func (r Report) Err() error {
	if r.OK() {
		return nil
	}
	return fmt.Errorf("substrate is missing what GCOS needs: %s (GCOS never alters substrate tables; create them, or use `gcos migrate up --substrate=create` on a greenfield database)",
		strings.Join(r.Missing, ", "))
}

// Verify checks tables (Tables, or Bound under a source binding), their columns and indexes in the current schema.
func Verify(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, tables []Table) (Report, error) {
	cols := map[string]map[string]bool{}
	rows, err := q.Query(ctx, `
		SELECT c.relname, a.attname
		FROM pg_class c
		JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
		WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')`)
	if err != nil {
		return Report{}, fmt.Errorf("verify substrate: %w", err)
	}
	for rows.Next() {
		var t, c string
		if err := rows.Scan(&t, &c); err != nil {
			return Report{}, fmt.Errorf("verify substrate: %w", err)
		}
		if cols[t] == nil {
			cols[t] = map[string]bool{}
		}
		cols[t][c] = true
	}
	if err := rows.Err(); err != nil {
		return Report{}, fmt.Errorf("verify substrate: %w", err)
	}
	indexed, err := indexedColumns(ctx, q)
	if err != nil {
		return Report{}, err
	}
	var r Report
	for _, t := range tables {
		have, ok := cols[t.Name]
		if !ok {
			if t.Optional {
				r.AbsentOptional = append(r.AbsentOptional, t.Name)
			} else {
				r.Missing = append(r.Missing, t.Name)
			}
			continue
		}
		for _, c := range t.Columns {
			if !have[c] {
				r.Missing = append(r.Missing, t.Name+"."+c)
			}
		}
		for _, ix := range t.Indexes {
			if !indexed[t.Name+"("+strings.Join(ix.Columns, ",")+")"] {
				r.MissingIndexes = append(r.MissingIndexes, ix.CreateStatement(t.Name))
			}
		}
	}
	sort.Strings(r.Missing)
	return r, nil
}

// indexedColumns returns "table(col1,col2)" for every index's leading column list in the current schema.
func indexedColumns(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) (map[string]bool, error) {
	rows, err := q.Query(ctx, `
		SELECT t.relname, array_agg(a.attname ORDER BY k.ord)
		FROM pg_index i
		JOIN pg_class t ON t.oid = i.indrelid
		CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
		WHERE t.relnamespace = current_schema()::regnamespace
		GROUP BY i.indexrelid, t.relname`)
	if err != nil {
		return nil, fmt.Errorf("verify substrate indexes: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var t string
		var cs []string
		if err := rows.Scan(&t, &cs); err != nil {
			return nil, fmt.Errorf("verify substrate indexes: %w", err)
		}
		// Any prefix of an index serves a keyset or point lookup on those leading columns.
		for n := 1; n <= len(cs); n++ {
			out[t+"("+strings.Join(cs[:n], ",")+")"] = true
		}
	}
	return out, rows.Err()
}

func existing(ctx context.Context, tx pgx.Tx) (map[string]bool, error) {
	rows, err := tx.Query(ctx, `SELECT relname FROM pg_class WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r','p','v','m')`)
	if err != nil {
		return nil, fmt.Errorf("list existing tables: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list existing tables: %w", err)
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}
