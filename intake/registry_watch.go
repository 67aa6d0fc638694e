package intake

// The registry watch (SPEC §12 freshness; issue: a token covers every source write). The authority and rule
// registries (intake.registries: ownership, exceptions, collections, …) are small, and an edit of one may come with
// no change-ledger row: a revoked owner would then stay "covered" until the next full audit. So the intake reads
// each whole, every intake.registry_poll, and compares a fingerprint of every row (hashtextextended of the row's
// text) with the one it last handed off: a row added, changed or gone is handed off as a change-ledger row of the
// registry's entity_type would be (intake.changelog_kinds gives its kind; gcos.RouteChange the groups it dirties).
// No trigger on the registry, no column it must have. The diff, the new fingerprints and the handoff commit
// together: killed anywhere, a poll loses nothing and hands off nothing twice. The first poll of a registry only
// records it (the backfill judged what it held).

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// watchedRegistry is a configured registry whose table exists, with the table the source binding names.
type watchedRegistry struct {
	gcos.WatchedRegistry
	table string // quoted, schema-qualified when configured so
}

// rowFingerprint is a registry row's fingerprint (alias t): the poll and a token's question compute it alike.
const rowFingerprint = `hashtextextended(t::text, 0)`

// watchedRegistries lists the configured registries that exist now (an absent optional registry is not watched).
func (s *Stage) watchedRegistries(ctx context.Context) ([]watchedRegistry, error) {
	var out []watchedRegistry
	for _, r := range s.cfg.Intake.Registries {
		table := postgres.Quote(strings.Split(s.cfg.Binding.RegistryTable(r.Table), ".")...)
		ok, err := postgres.TableExists(ctx, s.pool, table)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, watchedRegistry{WatchedRegistry: r, table: table})
		}
	}
	s.registries.Store(&out)
	return out, nil
}

// registryDiffSQL reads a registry whole, compares each row's fingerprint with the one last handed off, records the
// new ones and the poll, and returns what changed — all in one statement, so one snapshot: a row edited after it
// is seen by the next poll. first is true when the registry was never polled.
func registryDiffSQL(r watchedRegistry) string {
	return `WITH raw AS (SELECT (t.` + postgres.Quote(r.Key) + `)::text AS key, ` + rowFingerprint + ` AS fp FROM ` + r.table + ` t),
cur AS (SELECT key, bit_xor(fp) AS fp FROM raw WHERE key IS NOT NULL GROUP BY key), -- rows sharing a key change as one
old AS (SELECT key, fingerprint FROM gcos_registry_row WHERE registry = $1),
first AS (SELECT NOT EXISTS (SELECT 1 FROM gcos_registry_poll WHERE registry = $1) AS first),
diff AS (
    SELECT coalesce(c.key, o.key) AS key,
           CASE WHEN o.key IS NULL THEN 'create' WHEN c.key IS NULL THEN 'delete' ELSE 'update' END AS action
    FROM cur c FULL JOIN old o ON o.key = c.key
    WHERE c.key IS NULL OR o.key IS NULL OR o.fingerprint <> c.fp),
gone AS (DELETE FROM gcos_registry_row g USING diff d WHERE g.registry = $1 AND g.key = d.key AND d.action = 'delete'),
kept AS (INSERT INTO gcos_registry_row (registry, key, fingerprint)
         SELECT $1, c.key, c.fp FROM cur c JOIN diff d ON d.key = c.key
         ON CONFLICT (registry, key) DO UPDATE SET fingerprint = excluded.fingerprint),
polled AS (INSERT INTO gcos_registry_poll (registry, polled_at, row_count, xor_fingerprint)
           SELECT $1, statement_timestamp(), count(*), coalesce(bit_xor(fp), 0) FROM raw
           ON CONFLICT (registry) DO UPDATE SET polled_at = excluded.polled_at, row_count = excluded.row_count,
               xor_fingerprint = excluded.xor_fingerprint)
SELECT (SELECT first FROM first), d.key, d.action FROM (SELECT 1) one LEFT JOIN diff d ON true ORDER BY d.key`
}

// RegistryTick is what one poll of the watched registries handed off.
type RegistryTick struct {
	Registries int            `json:"registries"` // watched (existing) registries polled
	Busy       int            `json:"busy"`       // polled by another worker at the same moment
	Changed    map[string]int `json:"changed"`    // rows added, changed or gone, by registry
	Stats      HandoffStats   `json:"stats"`

	marked []string // the keys of the groups the tick's handoffs marked
}

// registryLockClass is the advisory-lock class of the registry watch: two workers never poll one registry at once.
const registryLockClass = 0x67636f73 // "gcos"

// PollRegistries polls every watched registry once, each in its own transaction with its handoff; a registry that
// fails is named in the error and the others are polled all the same.
func (s *Stage) PollRegistries(ctx context.Context) (RegistryTick, error) {
	tick := RegistryTick{Changed: map[string]int{}}
	regs, err := s.watchedRegistries(ctx)
	if err != nil {
		return tick, fmt.Errorf("registry watch: %w", err)
	}
	var errs []error
	for _, r := range regs {
		tick.Registries++
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			var mine bool
			if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1::int, hashtext($2))`, registryLockClass, r.Table).Scan(&mine); err != nil {
				return err
			}
			if !mine {
				tick.Busy++
				return nil
			}
			rows, err := tx.Query(ctx, registryDiffSQL(r), r.Table)
			if err != nil {
				return err
			}
			var first bool
			var changed []postgres.TailRow
			// The poll's instant stands for a row id: its signals are told from an earlier poll's.
			now := time.Now()
			id := now.UnixMicro()
			for rows.Next() {
				var key, action *string
				if err := rows.Scan(&first, &key, &action); err != nil {
					rows.Close()
					return err
				}
				if key != nil {
					changed = append(changed, postgres.TailRow{Source: "registry:" + r.Table, ID: id, TS: now, EntityType: r.EntityType,
						EntityCode: *key, Action: *action, Observed: true})
				}
			}
			if err := rows.Err(); err != nil {
				return err
			}
			if first || len(changed) == 0 {
				return nil
			}
			tick.Changed[r.Table] = len(changed)
			failures, st, err := s.applyHandoff(ctx, tx, changed)
			if err != nil {
				return err
			}
			if len(failures) > 0 {
				// Nothing is recorded as handed off: the next poll tries the whole diff again.
				return fmt.Errorf("%d of %d changed rows could not be handed off, first %s: %w", len(failures), len(changed), changed[0].EntityCode, failures[0].Err)
			}
			tick.Stats.add(st)
			tick.marked = append(tick.marked, st.marked...)
			return nil
		})
		if err != nil {
			errs = append(errs, fmt.Errorf("registry watch: %s: %w", r.Table, err)) // the others are polled all the same
		}
	}
	return tick, errors.Join(errs...)
}

// registriesPresentSQL is presentSQL's part for the watched registries ($3: their names, in order): for each (from
// i = base), whether it was polled, when, and whether it holds now what its last poll handed off (same count and XOR
// of fingerprints).
func registriesPresentSQL(regs []watchedRegistry, base int) []string {
	var parts []string
	for k, r := range regs {
		parts = append(parts, fmt.Sprintf(`SELECT %d AS i, p.registry IS NOT NULL AS found, p.polled_at AS position_tstz,
	    NULL::timestamp AS position_ts, NULL::bigint AS position_id, NULL::timestamptz AS instant,
	    p.registry IS NULL OR (SELECT (count(*), coalesce(bit_xor(`+rowFingerprint+`), 0)) FROM %s t) IS DISTINCT FROM (p.row_count, p.xor_fingerprint) AS changed
	FROM (SELECT 1) one LEFT JOIN gcos_registry_poll p ON p.registry = ($3::text[])[%d]`, base+k, r.table, k+1))
	}
	return parts
}
