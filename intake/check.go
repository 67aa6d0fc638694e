package intake

// Start-up: the cursor row and the preconditions of a lossless tail.

import (
	"context"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// tailClockDefault is what a column default says about the database clock.
type tailClockDefault struct {
	ok        bool   // the default is the database clock (possibly cast or converted to a fixed zone)
	zone      string // a zone fixed in the expression: timezone('UTC', now()) or now() AT TIME ZONE 'UTC'
	local     bool   // LOCALTIMESTAMP: the session's local time
	precision int    // fractional digits kept (6 = microseconds, all there are)
	why       string // when not ok
}

var (
	tailClockFnRE = regexp.MustCompile(`^(now|transaction_timestamp|statement_timestamp|clock_timestamp)\(\)$`)
	tailClockKwRE = regexp.MustCompile(`^(CURRENT_TIMESTAMP|LOCALTIMESTAMP)(?:\((\d)\))?$`)
	tailCastRE    = regexp.MustCompile(`^(.*)::timestamp(?:\((\d)\))? (with|without) time zone$`)
	tailZoneFnRE  = regexp.MustCompile(`^timezone\('((?:[^']|'')+)'::text, (.*)\)$`)
	tailAtZoneRE  = regexp.MustCompile(`^(.*) AT TIME ZONE '((?:[^']|'')+)'::text$`)
)

// tailStripParens removes one pair of parentheses that encloses the whole expression.
func tailStripParens(e string) (string, bool) {
	if len(e) < 2 || e[0] != '(' || e[len(e)-1] != ')' {
		return e, false
	}
	depth, inQuote := 0, false
	for i, c := range e {
		switch {
		case c == '\'':
			inQuote = !inQuote
		case inQuote:
		case c == '(':
			depth++
		case c == ')':
			depth--
			if depth == 0 && i != len(e)-1 {
				return e, false
			}
		}
	}
	return strings.TrimSpace(e[1 : len(e)-1]), true
}

// tailParseClockDefault reads pg_get_expr of a column default. It accepts the database clock (now(),
// CURRENT_TIMESTAMP[(p)], transaction_timestamp(), statement_timestamp(), clock_timestamp(), LOCALTIMESTAMP[(p)]),
// through casts and at most one conversion to a fixed zone; anything else is not the database clock.
func tailParseClockDefault(expr string, tzColumn bool) tailClockDefault {
	d := tailClockDefault{precision: 6}
	e := strings.TrimSpace(expr)
	castToTZ := false
	for range 20 {
		if inner, ok := tailStripParens(e); ok {
			e = inner
			continue
		}
		if m := tailCastRE.FindStringSubmatch(e); m != nil {
			if m[2] != "" {
				d.precision = min(d.precision, int(m[2][0]-'0'))
			}
			if m[3] == "with" && d.zone == "" && !d.local {
				castToTZ = true
			}
			e = strings.TrimSpace(m[1])
			continue
		}
		m := tailZoneFnRE.FindStringSubmatch(e)
		if m == nil {
			if a := tailAtZoneRE.FindStringSubmatch(e); a != nil {
				m = []string{a[0], a[2], a[1]}
			}
		}
		if m != nil {
			if d.zone != "" {
				return tailClockDefault{why: "the default converts between time zones twice"}
			}
			d.zone = strings.ReplaceAll(m[1], "''", "'")
			e = strings.TrimSpace(m[2])
			continue
		}
		break
	}
	switch m := tailClockKwRE.FindStringSubmatch(e); {
	case tailClockFnRE.MatchString(e):
	case m != nil:
		d.local = m[1] == "LOCALTIMESTAMP"
		if m[2] != "" {
			d.precision = min(d.precision, int(m[2][0]-'0'))
		}
	default:
		return tailClockDefault{why: "the default is not the database clock"}
	}
	if d.zone != "" && d.local {
		return tailClockDefault{why: "the default converts a local time to another zone"}
	}
	if (d.zone != "" || d.local) && (tzColumn || castToTZ) {
		return tailClockDefault{why: "the default turns the clock into a local time and back into an instant"}
	}
	d.ok = true
	return d
}

// tailColumn is one column of a source table as the catalog describes it.
type tailColumn struct {
	typ     string
	typmod  int32
	notNull bool
	def     *string
}

const tailColumnsSQL = `
SELECT a.attname::text, a.atttypid::regtype::text, a.atttypmod, a.attnotnull, pg_get_expr(d.adbin, d.adrelid)
FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`

func tailInspectColumns(ctx context.Context, q postgres.Querier, src postgres.TailSource) (map[string]tailColumn, error) {
	rows, err := q.Query(ctx, tailColumnsSQL, src.SQL("{t}"))
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", qualifiedTable(src), err)
	}
	cols := map[string]tailColumn{}
	for rows.Next() {
		var name string
		var c tailColumn
		if err := rows.Scan(&name, &c.typ, &c.typmod, &c.notNull, &c.def); err != nil {
			rows.Close()
			return nil, fmt.Errorf("inspect %s: %w", qualifiedTable(src), err)
		}
		cols[name] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("inspect %s: %w", qualifiedTable(src), err)
	}
	return cols, nil
}

// A cursor's ts_type: the order key column's type.
const (
	TSInstant   = "timestamptz" // timestamp with time zone
	TSLocalTime = "timestamp"   // timestamp without time zone: local wall times of the writers' zone
)

// TSTypes lists every ts_type (the CHECK list of gov_worker_cursor.ts_type).
var TSTypes = []string{TSInstant, TSLocalTime}

// tailTSTypeOf maps a column type to the cursor's ts_type ("" when it cannot order a tail).
func tailTSTypeOf(typ string) string {
	switch typ {
	case "timestamp with time zone":
		return TSInstant
	case "timestamp without time zone":
		return TSLocalTime
	}
	return ""
}

// tailResolveZone decides the zone a timestamp-without-time-zone column's values are local to: the configured
// one, the one fixed in the column default, the database's TimeZone setting, or this session's TimeZone.
func tailResolveZone(ctx context.Context, q pgx.Tx, src postgres.TailSource, def tailClockDefault) (zone, how string, err error) {
	switch {
	case src.TimeZone != "":
		zone, how = src.TimeZone, "configured for the source"
	case def.zone != "":
		zone, how = def.zone, "fixed in the column default"
	default:
		var dbZone *string
		if err := q.QueryRow(ctx, `
			SELECT split_part(cfg, '=', 2) FROM pg_db_role_setting s CROSS JOIN LATERAL unnest(s.setconfig) AS cfg
			WHERE s.setrole = 0 AND s.setdatabase = (SELECT oid FROM pg_database WHERE datname = current_database())
			  AND lower(split_part(cfg, '=', 1)) = 'timezone'
			LIMIT 1`).Scan(&dbZone); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return "", "", fmt.Errorf("resolve time zone: %w", err)
		}
		if dbZone != nil && *dbZone != "" {
			zone, how = *dbZone, "the database's TimeZone setting"
		} else {
			if err := q.QueryRow(ctx, `SELECT current_setting('TimeZone')`).Scan(&zone); err != nil {
				return "", "", fmt.Errorf("resolve time zone: %w", err)
			}
			how = "the server's TimeZone setting"
		}
	}
	// Validate under a savepoint: an unknown zone is an error that would otherwise abort the caller's transaction.
	err = pgx.BeginFunc(ctx, q, func(sp pgx.Tx) error {
		var ignored time.Time
		return sp.QueryRow(ctx, `SELECT now() AT TIME ZONE $1::text`, zone).Scan(&ignored)
	})
	if err != nil {
		if postgres.IsPgCode(err, "22023") {
			return "", "", gcos.Errorf(gcos.EINVALID, "source %s: time zone %s (%s) is not known to PostgreSQL", src.Name, gcos.Quote(zone), how)
		}
		return "", "", fmt.Errorf("resolve time zone: %w", err)
	}
	return zone, how, nil
}

// EnsureCursor creates the cursor row of src if it is missing ("before the first row") and keeps its binding
// (table, order key, type, zone) current. A binding change under a cursor that already has a position is refused
// (ECONFLICT): the position would not mean anything in the new table.
func (s *Stage) EnsureCursor(ctx context.Context, src postgres.TailSource) (Cursor, error) {
	if err := src.Validate(); err != nil {
		return Cursor{}, err
	}
	var out Cursor
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		cols, err := tailInspectColumns(ctx, tx, src)
		if err != nil {
			return err
		}
		ts, ok := cols[src.TSColumn]
		if !ok {
			return gcos.Errorf(gcos.EINVALID, "source %s: table %s has no column %s", src.Name, qualifiedTable(src), src.TSColumn)
		}
		tsType := tailTSTypeOf(ts.typ)
		if tsType == "" {
			return gcos.Errorf(gcos.EINVALID, "source %s: %s.%s is %s; a tail needs timestamptz or timestamp",
				src.Name, qualifiedTable(src), src.TSColumn, ts.typ)
		}
		var zone *string
		meta := map[string]any{"kind": string(src.Kind)}
		if tsType == TSLocalTime {
			var def tailClockDefault
			if ts.def != nil {
				def = tailParseClockDefault(*ts.def, false)
			}
			z, how, err := tailResolveZone(ctx, tx, src, def)
			if err != nil {
				return err
			}
			zone, meta["time_zone_from"] = &z, how
		}
		// Workers starting together race to create the cursor: the insert yields to a row another one committed (or
		// waits for one it has not committed yet), and the row is then read locked either way.
		tag, err := tx.Exec(ctx, `
			INSERT INTO gov_worker_cursor (worker_name, source, source_table, ts_column, id_column, ts_type, time_zone, metadata)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`, tailWorkerPrefix+src.Name, src.Name,
			qualifiedTable(src), src.TSColumn, src.IDColumn, tsType, zone, meta)
		if err != nil {
			return postgres.MapError(err, "ensure cursor "+src.Name)
		}
		existing, err := tailScanCursor(tx.QueryRow(ctx, `SELECT `+tailCursorCols+` FROM gov_worker_cursor c
			WHERE c.source = $1 FOR UPDATE OF c`, src.Name))
		if err != nil {
			return fmt.Errorf("ensure cursor %s: %w", src.Name, err)
		}
		if tag.RowsAffected() == 0 {
			rebind := existing.table != qualifiedTable(src) || existing.tsColumn != src.TSColumn ||
				existing.idColumn != src.IDColumn || existing.noTZ != (tsType == TSLocalTime)
			if rebind && !existing.pos.start {
				return gcos.Errorf(gcos.ECONFLICT, "intake cursor %s is at %s of %s(%s, %s); it cannot be rebound to %s(%s, %s) "+
					"(%s) without losing its meaning: reset it to start first", src.Name,
					existing.pos.watermark(existing.noTZ), existing.table, existing.tsColumn, existing.idColumn,
					qualifiedTable(src), src.TSColumn, src.IDColumn, tsType)
			}
			if _, err := tx.Exec(ctx, `
				UPDATE gov_worker_cursor SET source_table = $2, ts_column = $3, id_column = $4, ts_type = $5, time_zone = $6,
				       metadata = metadata || $7::jsonb, updated_at = now()
				WHERE source = $1`, src.Name, qualifiedTable(src), src.TSColumn, src.IDColumn, tsType, zone, meta); err != nil {
				return postgres.MapError(err, "ensure cursor "+src.Name)
			}
		}
		out, err = tailScanCursorRow(tx.QueryRow(ctx, tailCursorSelectSQL+` WHERE c.source = $1`, src.Name))
		return err
	})
	return out, err
}

// Tail check statuses.
const (
	CheckOK   = "ok"
	CheckWarn = "warn" // reported, not refused
	CheckFail = "fail" // the intake refuses to start
)

// TailCheckItem is one precondition and what was found.
type TailCheckItem struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn or fail
	Detail string `json:"detail"`
}

// TailCheck is the precondition report of one source.
type TailCheck struct {
	Source   string          `json:"source"`
	TSType   string          `json:"ts_type,omitempty"`
	TimeZone string          `json:"time_zone,omitempty"`
	Items    []TailCheckItem `json:"items"`
}

func (c *TailCheck) add(name, status, format string, args ...any) {
	c.Items = append(c.Items, TailCheckItem{Name: name, Status: status, Detail: fmt.Sprintf(format, args...)})
}

// Err is nil when no precondition failed, else an EINVALID error naming every failed one.
func (c TailCheck) Err() error {
	var failed []string
	for _, it := range c.Items {
		if it.Status == CheckFail {
			failed = append(failed, it.Name+": "+it.Detail)
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return gcos.Errorf(gcos.EINVALID, "intake of %s refused, the tail would not be lossless: %s", c.Source,
		strings.Join(failed, "; "))
}

// CheckTail verifies the preconditions of a lossless tail of src (SPEC §9.2): the server is the primary, this role
// sees every session's xact_start (superuser or pg_read_all_stats), no prepared transaction is pending, the order
// key is (timestamptz|timestamp, integer) with the timestamp set by the database clock inside the inserting
// transaction, its precision is covered by the guard, a timestamp-without-time-zone column has a zone that never
// moves back, and a role filter leaves out no role that can write the table. It returns the report and, when
// something failed, TailCheck.Err.
func (s *Stage) CheckTail(ctx context.Context, src postgres.TailSource, cfg gcos.IntakeConfig) (TailCheck, error) {
	c := TailCheck{Source: src.Name}
	if err := src.Validate(); err != nil {
		return c, err
	}
	err := s.inTx(ctx, func(tx pgx.Tx) error { return tailCheck(ctx, tx, src, cfg, &c) })
	if err != nil {
		return c, err
	}
	return c, c.Err()
}

func tailCheck(ctx context.Context, tx pgx.Tx, src postgres.TailSource, cfg gcos.IntakeConfig, c *TailCheck) error {
	var inRecovery, super, stats bool
	var user string
	if err := tx.QueryRow(ctx, `SELECT pg_is_in_recovery(), current_user::text,
		coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),
		pg_has_role(current_user, 'pg_read_all_stats', 'USAGE')`).Scan(&inRecovery, &user, &super, &stats); err != nil {
		return fmt.Errorf("check %s: %w", src.Name, err)
	}
	if inRecovery {
		c.add("primary", CheckFail, "the server is a standby (pg_is_in_recovery() is true); point the intake at the primary")
	} else {
		c.add("primary", CheckOK, "the server is the primary")
	}
	switch {
	case super:
		c.add("activity_visibility", CheckOK, "role %s is a superuser and sees every session's xact_start", user)
	case stats:
		c.add("activity_visibility", CheckOK, "role %s has pg_read_all_stats", user)
	default:
		c.add("activity_visibility", CheckFail, "role %s cannot see other roles' xact_start in pg_stat_activity, so an open "+
			"writer would go unnoticed; run GRANT pg_read_all_stats TO %s", user, postgres.Quote(user))
	}
	holders, err := tailPreparedList(ctx, tx)
	if err != nil {
		return err
	}
	if len(holders) > 0 {
		var names []string
		for _, h := range holders {
			names = append(names, fmt.Sprintf("%q by %s, prepared %s ago", h.PreparedGID, h.Role,
				time.Duration(h.AgeSeconds*float64(time.Second)).Round(time.Millisecond)))
		}
		c.add("prepared_transactions", CheckFail, "prepared transactions are pending in this database (%s); they can "+
			"commit rows of any age after leaving pg_stat_activity: COMMIT PREPARED or ROLLBACK PREPARED them",
			strings.Join(names, ", "))
	} else {
		c.add("prepared_transactions", CheckOK, "no prepared transaction in this database")
	}

	cols, err := tailInspectColumns(ctx, tx, src)
	if err != nil {
		return err
	}
	if len(cols) == 0 {
		c.add("source_table", CheckFail, "table %s does not exist (or this role cannot see it)", qualifiedTable(src))
		return nil
	}
	var missing []string
	for _, f := range src.Fields() {
		if _, ok := cols[src.Column(f)]; !ok {
			missing = append(missing, src.Column(f))
		}
	}
	if len(missing) > 0 {
		c.add("source_table", CheckFail, "table %s lacks column(s) %s", qualifiedTable(src), strings.Join(missing, ", "))
	} else {
		c.add("source_table", CheckOK, "table %s has every mapped column", qualifiedTable(src))
	}
	idCol, ok := cols[src.IDColumn]
	switch {
	case !ok:
		c.add("id_column", CheckFail, "%s.%s does not exist", qualifiedTable(src), src.IDColumn)
	case idCol.typ != "bigint" && idCol.typ != "integer" && idCol.typ != "smallint":
		c.add("id_column", CheckFail, "%s.%s is %s; the tie-breaker must be an integer", qualifiedTable(src), src.IDColumn, idCol.typ)
	default:
		c.add("id_column", CheckOK, "%s.%s is %s", qualifiedTable(src), src.IDColumn, idCol.typ)
		// The sweep for rows behind the cursor (sweep.go) reads ids in nextval order; a per-session cache breaks it.
		var seq *string
		var cache *int64
		if err := tx.QueryRow(ctx, `SELECT q, (SELECT s.cache_size FROM pg_sequences s
			    WHERE format('%I.%I', s.schemaname, s.sequencename)::regclass = q::regclass)
			FROM pg_get_serial_sequence($1, $2) AS q`, src.SQL("{t}"), src.IDColumn).Scan(&seq, &cache); err != nil {
			return fmt.Errorf("check %s: id sequence: %w", src.Name, err)
		}
		if seq != nil && cache != nil && *cache > 1 {
			c.add("id_sequence", CheckWarn, "%s.%s comes from sequence %s with CACHE %d: sessions hand out ids out of order, so "+
				"the sweep for rows behind the cursor can miss one; run ALTER SEQUENCE %s CACHE 1", qualifiedTable(src),
				src.IDColumn, *seq, *cache, *seq)
		}
	}
	tsCol, ok := cols[src.TSColumn]
	if !ok {
		c.add("ts_column", CheckFail, "%s.%s does not exist", qualifiedTable(src), src.TSColumn)
		return nil
	}
	c.TSType = tailTSTypeOf(tsCol.typ)
	if c.TSType == "" {
		c.add("ts_column", CheckFail, "%s.%s is %s; the order key must be timestamptz or timestamp", qualifiedTable(src),
			src.TSColumn, tsCol.typ)
		return nil
	}
	c.add("ts_column", CheckOK, "%s.%s is %s", qualifiedTable(src), src.TSColumn, tsCol.typ)
	if !tsCol.notNull {
		c.add("ts_not_null", CheckWarn, "%s.%s is nullable; a row inserted with NULL there is never handed off",
			qualifiedTable(src), src.TSColumn)
	}

	var def tailClockDefault
	switch {
	case tsCol.def == nil:
		c.add("clock_default", CheckFail, "%s.%s has no default; the tail is lossless only when the database clock sets it "+
			"inside the inserting transaction (e.g. DEFAULT now())", qualifiedTable(src), src.TSColumn)
	default:
		def = tailParseClockDefault(*tsCol.def, c.TSType == "timestamptz")
		if !def.ok {
			c.add("clock_default", CheckFail, "%s.%s defaults to %s: %s; the tail is lossless only when the database clock "+
				"sets it inside the inserting transaction (e.g. DEFAULT now())", qualifiedTable(src), src.TSColumn, *tsCol.def, def.why)
		} else {
			c.add("clock_default", CheckOK, "%s.%s defaults to %s (the database clock; rows must not supply it)",
				qualifiedTable(src), src.TSColumn, *tsCol.def)
		}
	}
	precision := def.precision
	if tsCol.typmod >= 0 && int(tsCol.typmod) < precision {
		precision = int(tsCol.typmod)
	}
	if def.ok && precision < 6 {
		// Rounding to p digits can put ts up to half a unit before the transaction's start.
		need := time.Duration(5 * math.Pow10(8-precision))
		if cfg.HorizonGuard.Duration() < need {
			c.add("precision", CheckFail, "%s.%s keeps %d fractional digit(s), so a row's timestamp can round to %s before its "+
				"transaction began; set intake.horizon_guard to at least %s", qualifiedTable(src), src.TSColumn, precision, need, need)
		} else {
			c.add("precision", CheckOK, "rounding to %d digit(s) is covered by the horizon guard %s", precision, cfg.HorizonGuard)
		}
	}
	var hasIndex bool
	if err := tx.QueryRow(ctx, `
		SELECT EXISTS (SELECT 1 FROM pg_index i
		               WHERE i.indrelid = to_regclass($1) AND i.indnkeyatts >= 2
		                 AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = $2)
		                 AND i.indkey[1] = (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = $3))`,
		src.SQL("{t}"), src.TSColumn, src.IDColumn).Scan(&hasIndex); err != nil {
		return fmt.Errorf("check %s: index: %w", src.Name, err)
	}
	if hasIndex {
		c.add("order_index", CheckOK, "an index on (%s, %s) exists", src.TSColumn, src.IDColumn)
	} else {
		c.add("order_index", CheckWarn, "no index on (%s, %s): every poll scans the table; run CREATE INDEX CONCURRENTLY ON %s (%s, %s)",
			src.TSColumn, src.IDColumn, src.SQL("{t}"), src.SQL("{ts}"), src.SQL("{id}"))
	}

	if c.TSType == TSLocalTime && def.ok {
		if err := tailCheckZone(ctx, tx, src, def, c); err != nil {
			return err
		}
	}
	if len(cfg.RoleFilter) > 0 {
		rows, err := tx.Query(ctx, `
			SELECT r.rolname::text FROM pg_roles r
			WHERE r.rolcanlogin AND NOT (r.rolname = ANY ($2::text[]))
			  AND (r.rolsuper OR EXISTS (SELECT 1 FROM pg_roles w
			                             WHERE pg_has_role(r.oid, w.oid, 'MEMBER')
			                               AND has_table_privilege(w.oid, to_regclass($1), 'INSERT')))
			ORDER BY 1`, src.SQL("{t}"), cfg.RoleFilter)
		if err != nil {
			return fmt.Errorf("check %s: role filter: %w", src.Name, err)
		}
		writers, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("check %s: role filter: %w", src.Name, err)
		}
		if len(writers) > 0 {
			c.add("role_filter", CheckFail, "login role(s) %s can write %s but are not in intake.role_filter %v; their open "+
				"transactions would not hold the horizon back", strings.Join(writers, ", "), qualifiedTable(src), cfg.RoleFilter)
		} else {
			c.add("role_filter", CheckOK, "every login role that can write %s is in the role filter %v (sessions are "+
				"matched by login role: a SET ROLE to a writer from another login is not seen)", qualifiedTable(src), cfg.RoleFilter)
		}
	}
	return nil
}

// tailCheckZone checks the zone of a timestamp-without-time-zone column: it is known, it never moves its clock
// back (a repeated local hour would put new rows behind the cursor), and no writer role is set to another zone.
func tailCheckZone(ctx context.Context, tx pgx.Tx, src postgres.TailSource, def tailClockDefault, c *TailCheck) error {
	zone, how, err := tailResolveZone(ctx, tx, src, def)
	if err != nil {
		if gcos.ErrorCode(err) == gcos.EINVALID {
			c.add("time_zone", CheckFail, "%s", gcos.ErrorMessage(err))
			return nil
		}
		return err
	}
	c.TimeZone = zone
	var back *time.Time
	if err := tx.QueryRow(ctx, `
		SELECT min(t) FROM (
		    SELECT t, (t AT TIME ZONE $1::text) - (t AT TIME ZONE 'UTC') AS off,
		           lead((t AT TIME ZONE $1::text) - (t AT TIME ZONE 'UTC')) OVER (ORDER BY t) AS next_off
		    FROM generate_series(now() - interval '1 year', now() + interval '2 years', interval '1 day') AS t) s
		WHERE next_off < off`, zone).Scan(&back); err != nil {
		return fmt.Errorf("check %s: time zone: %w", src.Name, err)
	}
	if back != nil {
		c.add("time_zone", CheckFail, "%s.%s holds local times in %s (%s), which sets its clocks back around %s: local times "+
			"repeat and rows written then would sort behind the cursor; have the writers use a zone without DST (e.g. "+
			"ALTER DATABASE ... SET timezone = 'UTC') or default the column to timezone('UTC', now())",
			qualifiedTable(src), src.TSColumn, zone, how, back.UTC().Format(time.RFC3339))
		return nil
	}
	if def.zone != "" {
		c.add("time_zone", CheckOK, "local times in %s, fixed in the column default", zone)
		return nil
	}
	rows, err := tx.Query(ctx, `
		SELECT coalesce(r.rolname::text, 'every role') || ' (' || CASE WHEN s.setdatabase = 0 THEN 'all databases'
		       ELSE 'this database' END || '): ' || split_part(cfg, '=', 2)
		FROM pg_db_role_setting s
		LEFT JOIN pg_roles r ON r.oid = s.setrole
		CROSS JOIN LATERAL unnest(s.setconfig) AS cfg
		WHERE s.setdatabase IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
		  AND lower(split_part(cfg, '=', 1)) = 'timezone'
		  AND (s.setrole = 0 OR has_table_privilege(s.setrole, to_regclass($2), 'INSERT'))
		  AND ((now() AT TIME ZONE split_part(cfg, '=', 2)) <> (now() AT TIME ZONE $1::text)
		       OR (now() + interval '6 months') AT TIME ZONE split_part(cfg, '=', 2)
		          <> (now() + interval '6 months') AT TIME ZONE $1::text)
		ORDER BY 1`, zone, src.SQL("{t}"))
	if err != nil {
		return fmt.Errorf("check %s: writer time zones: %w", src.Name, err)
	}
	others, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("check %s: writer time zones: %w", src.Name, err)
	}
	if len(others) > 0 {
		c.add("time_zone", CheckFail, "%s.%s is read as local times in %s (%s) but writers are set to other zones: %s",
			qualifiedTable(src), src.TSColumn, zone, how, strings.Join(others, "; "))
		return nil
	}
	c.add("time_zone", CheckOK, "local times in %s (%s); a writer session that sets another TimeZone stores its own local "+
		"time, and its rows are handed off out of order and reported (handoff_out_of_order)", zone, how)
	return nil
}

func tailPreparedList(ctx context.Context, q postgres.Querier) ([]HorizonHolder, error) {
	rows, err := q.Query(ctx, tailPreparedSQL)
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HorizonHolder, error) {
		var h HorizonHolder
		err := r.Scan(&h.PreparedGID, &h.Role, &h.XactStart, &h.AgeSeconds)
		h.State = "prepared"
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("list prepared transactions: %w", err)
	}
	return out, nil
}
