package world

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"gcos"
)

// Churn keeps a world alive for the demo: it inserts new births and registry_changelog rows at steady rates, the way
// the organisation's own writers would, until its context ends. Births are ordinary INSERTs in small transactions
// with born_at left to its DEFAULT now() (the database clock); their entity_code is "<type>-r<id>", the id coming
// from the birth_registry sequence, so it never collides with a generated code ("<type>-<7 digits>") or a child code.
// Changes use the vocabulary of the generated history with "timestamp" left to its DEFAULT now().
type Churn struct {
	// Pool is the database to write.
	Pool *pgxpool.Pool
	// BirthsPerSecond is the rate of new births; 0 for none.
	BirthsPerSecond float64
	// ChangesPerSecond is the rate of new registry_changelog rows; 0 for none.
	ChangesPerSecond float64
	// Seed seeds the choices of classes, statuses and changes; 0 means 1.
	Seed uint64
	// Logger receives a summary every minute and write errors; nil discards them.
	Logger *slog.Logger
	// Outage sets the back-off and the logging of failed writes (zero: the defaults).
	Outage gcos.OutageConfig
	// GovernancePerSecond is the rate of governance edits (GovernanceKinds: lifecycle, coverage, ownership,
	// exceptions, an untrusted row); 0 for none.
	GovernancePerSecond float64
	// ProposeEvery, with Propose set, edits the rule registries that often and calls Propose, which computes the
	// draft ruleset an operator may then activate; 0 for never.
	ProposeEvery time.Duration
	Propose      func(ctx context.Context) (version string, err error)

	births, changes, governance atomic.Int64
}

// Governance returns the number of governance edits Run has made so far.
func (c *Churn) Governance() int64 { return c.governance.Load() }

// Births returns the number of births Run has inserted so far.
func (c *Churn) Births() int64 { return c.births.Load() }

// Changes returns the number of registry_changelog rows Run has inserted so far.
func (c *Churn) Changes() int64 { return c.changes.Load() }

const (
	churnTick          = 100 * time.Millisecond
	churnMaxPerTick    = 10_000 // rows per kind and transaction; a slow database falls behind rather than piling up
	churnRecent        = 4096   // codes remembered for object changes
	churnReport        = time.Minute
	churnWriteTimeout  = 30 * time.Second // one tick's transaction, even after Run's context ended
	churnMaxGovernance = 50               // governance edits due at most (each is its own transaction)
)

// churnClass is an entity type churn can bear, with its collection and its weight (current births + 1).
type churnClass struct {
	entityType, collection string
	cum                    float64 // cumulative weight
}

type churnCode struct{ entityType, code, collection, status string }

// Run inserts births and changes at the configured rates until ctx is done, then returns nil. Write errors (for
// example while PostgreSQL restarts) are logged and retried on the next tick; only a setup failure is returned.
func (c *Churn) Run(ctx context.Context) error {
	if c.Pool == nil {
		return errors.New("world: churn needs a pool")
	}
	if c.BirthsPerSecond < 0 || c.ChangesPerSecond < 0 || c.GovernancePerSecond < 0 {
		return fmt.Errorf("world: churn rates must not be negative (births %v/s, changes %v/s, governance %v/s)",
			c.BirthsPerSecond, c.ChangesPerSecond, c.GovernancePerSecond)
	}
	log := c.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("system", "world", "subsystem", "churn")
	seed := c.Seed
	if seed == 0 {
		seed = 1
	}
	st, err := c.setup(ctx, rand.New(rand.NewPCG(seed, streamChurn)))
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}

	start := time.Now()
	lastReport := start
	var dueBirths, dueChanges, dueGovernance float64
	lastProposal := start
	tick := time.NewTicker(churnTick)
	defer tick.Stop()
	last := start
	ocfg := c.Outage
	if ocfg.BackoffMax <= 0 || ocfg.LogEvery <= 0 {
		ocfg = gcos.DefaultConfig().Outage
	}
	outage := gcos.NewOutageLog("demo churn", churnTick, ocfg, log)
	var retryAt time.Time // while the writes fail, ticks before this are skipped (the due rows accumulate, capped)
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-tick.C:
			dt := now.Sub(last).Seconds()
			last = now
			dueBirths = min(dueBirths+c.BirthsPerSecond*dt, churnMaxPerTick)
			dueChanges = min(dueChanges+c.ChangesPerSecond*dt, churnMaxPerTick)
			dueGovernance = min(dueGovernance+c.GovernancePerSecond*dt, churnMaxGovernance)
			if now.Before(retryAt) {
				continue
			}
			// A tick's writes are not cut off by the end of ctx: a transaction cancelled while it commits may have
			// committed, and then Births and Changes would under-count what was written.
			wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), churnWriteTimeout)
			if n := int(dueBirths); n > 0 {
				if err := st.insertBirths(wctx, n); err != nil {
					if ctx.Err() != nil {
						cancel()
						return nil
					}
					retryAt = now.Add(outage.Failed(fmt.Errorf("insert %d births: %w", n, err)))
				} else {
					outage.Succeeded()
					dueBirths -= float64(n)
					c.births.Add(int64(n))
				}
			}
			if n := int(dueChanges); n > 0 {
				if err := st.insertChanges(wctx, n); err != nil {
					if ctx.Err() != nil {
						cancel()
						return nil
					}
					retryAt = now.Add(outage.Failed(fmt.Errorf("insert %d changes: %w", n, err)))
				} else {
					outage.Succeeded()
					dueChanges -= float64(n)
					c.changes.Add(int64(n))
				}
			}
			for ; dueGovernance >= 1 && !now.Before(retryAt); dueGovernance-- {
				kind, what, err := st.governanceEdit(wctx)
				switch {
				case errors.Is(err, errNothingToEdit):
				case err != nil:
					if ctx.Err() != nil {
						cancel()
						return nil
					}
					retryAt = now.Add(outage.Failed(fmt.Errorf("governance edit %s: %w", kind, err)))
				default:
					outage.Succeeded()
					c.governance.Add(1)
					log.Debug("governance edit", "kind", kind, "what", what)
				}
			}
			if c.Propose != nil && c.ProposeEvery > 0 && now.Sub(lastProposal) >= c.ProposeEvery && !now.Before(retryAt) {
				lastProposal = now
				var what string
				err := pgx.BeginFunc(wctx, st.pool, func(tx pgx.Tx) error {
					var err error
					what, err = rulesEdit(wctx, st, tx)
					return err
				})
				var version string
				if err == nil {
					version, err = c.Propose(wctx)
				}
				if err != nil && ctx.Err() == nil && !errors.Is(err, errNothingToEdit) {
					log.Warn("demo ruleset proposal", "err", err)
				} else if err == nil {
					log.Info("demo: rule registries edited; a draft ruleset awaits approval", "edit", what, "ruleset", version,
						"activate_with", "gcos ruleset activate "+version+" --approval APR-… --by <you>")
				}
			}
			cancel()
			if now.Sub(lastReport) >= churnReport {
				lastReport = now
				log.Info("churn", "births", c.births.Load(), "changes", c.changes.Load(), "governance_edits", c.governance.Load(),
					"elapsed", now.Sub(start).Round(time.Second))
			}
		}
	}
}

// churnState is what Run needs between ticks.
type churnState struct {
	pool     *pgxpool.Pool
	r        *rand.Rand
	maker    *changeMaker
	seq      string // the birth_registry id sequence
	classes  []churnClass
	counts   map[string]int // births per collection, for count_changed details
	recent   []churnCode    // ring of codes for object changes
	recentAt int
}

func (c *Churn) setup(ctx context.Context, r *rand.Rand) (*churnState, error) {
	st := &churnState{pool: c.Pool, r: r, maker: newChangeMaker(r), counts: map[string]int{}}
	if err := c.Pool.QueryRow(ctx, `SELECT pg_get_serial_sequence('birth_registry', 'id')`).Scan(&st.seq); err != nil {
		return nil, fmt.Errorf("world: churn: find the birth_registry id sequence: %w", err)
	}
	rows, err := c.Pool.Query(ctx, `
		SELECT m.entity_type, m.registry_collection, coalesce(b.n, 0)
		FROM meta_catalog m
		LEFT JOIN (SELECT entity_type, count(*) AS n FROM birth_registry GROUP BY entity_type) b USING (entity_type)
		WHERE m.registry_collection IS NOT NULL
		ORDER BY m.entity_type`)
	if err != nil {
		return nil, fmt.Errorf("world: churn: read meta_catalog: %w", err)
	}
	var cum float64
	for rows.Next() {
		var et, coll string
		var n int64
		if err := rows.Scan(&et, &coll, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("world: churn: read meta_catalog: %w", err)
		}
		cum += float64(n + 1)
		st.classes = append(st.classes, churnClass{entityType: et, collection: coll, cum: cum})
		st.counts[coll] += int(n)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("world: churn: read meta_catalog: %w", err)
	}
	if len(st.classes) == 0 {
		return nil, errors.New("world: churn: meta_catalog has no entity type with a registry_collection " +
			"(generate a world first)")
	}
	// Recent births give object changes something real to talk about.
	rows, err = c.Pool.Query(ctx, `
		SELECT entity_type, entity_code, collection_name, status FROM birth_registry
		WHERE parent_code IS NULL ORDER BY id DESC LIMIT $1`,
		churnRecent)
	if err != nil {
		return nil, fmt.Errorf("world: churn: read recent births: %w", err)
	}
	for rows.Next() {
		var k churnCode
		if err := rows.Scan(&k.entityType, &k.code, &k.collection, &k.status); err != nil {
			rows.Close()
			return nil, fmt.Errorf("world: churn: read recent births: %w", err)
		}
		st.remember(k)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("world: churn: read recent births: %w", err)
	}
	return st, nil
}

func (st *churnState) remember(k churnCode) {
	if len(st.recent) < churnRecent {
		st.recent = append(st.recent, k)
		return
	}
	st.recent[st.recentAt] = k
	st.recentAt = (st.recentAt + 1) % churnRecent
}

// insertBirths inserts n births in one transaction.
func (st *churnState) insertBirths(ctx context.Context, n int) error {
	types := make([]string, n)
	colls := make([]string, n)
	stats := make([]string, n)
	srcs := make([]string, n)
	actors := make([]string, n)
	total := st.classes[len(st.classes)-1].cum
	for i := range n {
		w := st.r.Float64() * total
		k := sort.Search(len(st.classes), func(j int) bool { return st.classes[j].cum > w })
		k = min(k, len(st.classes)-1)
		types[i], colls[i] = st.classes[k].entityType, st.classes[k].collection
		switch u := st.r.IntN(100); {
		case u < 2:
			stats[i] = statusDraft
		case u < 3:
			stats[i] = statusPending
		default:
			stats[i] = statusActive
		}
		if st.r.IntN(100) < 20 {
			srcs[i], actors[i] = sourceRegistrySync, "registry-sync-bot"
		} else {
			srcs[i], actors[i] = sourceBirthAPI, "birth-gateway"
		}
	}
	rows, err := st.pool.Query(ctx, `
		INSERT INTO birth_registry (id, entity_code, collection_name, entity_type, status, source_system, actor_ref)
		SELECT s.id, s.entity_type || '-r' || s.id, s.collection_name, s.entity_type, s.status, s.source_system,
		       s.actor_ref
		FROM (SELECT nextval($1::regclass) AS id, t.*
		      FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[])
		           AS t(entity_type, collection_name, status, source_system, actor_ref)) s
		RETURNING entity_type, entity_code, collection_name, status`,
		st.seq, types, colls, stats, srcs, actors)
	if err != nil {
		return fmt.Errorf("world: churn: insert %d births: %w", n, err)
	}
	born, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (churnCode, error) {
		var k churnCode
		err := row.Scan(&k.entityType, &k.code, &k.collection, &k.status)
		return k, err
	})
	if err != nil {
		return fmt.Errorf("world: churn: insert %d births: %w", n, err)
	}
	for _, k := range born {
		st.remember(k)
		st.counts[k.collection]++
	}
	return nil
}

// insertChanges inserts n registry_changelog rows in one transaction.
func (st *churnState) insertChanges(ctx context.Context, n int) error {
	cols := make([][]string, 6)
	for i := range cols {
		cols[i] = make([]string, n)
	}
	resolved := make([]bool, n)
	for i := range n {
		var c change
		if len(st.recent) > 0 && st.r.IntN(100) < 50 {
			k := st.recent[st.r.IntN(len(st.recent))]
			c = st.maker.objectChange(k.entityType, k.code, k.collection, k.status, "birth-gateway")
		} else {
			c = st.maker.registryChange(time.Now(), func(coll int) int { return st.counts[bornCollections[coll].name] })
		}
		cols[0][i], cols[1][i], cols[2][i], cols[3][i], cols[4][i], cols[5][i] =
			c.entityType, c.entityCode, c.action, c.level, c.changedBy, c.detail
		resolved[i] = c.resolved
	}
	_, err := st.pool.Exec(ctx, `
		INSERT INTO registry_changelog (entity_type, entity_code, action, alert_level, changed_by, alert_detail, resolved)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::bool[])`,
		cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], resolved)
	if err != nil {
		return fmt.Errorf("world: churn: insert %d changes: %w", n, err)
	}
	return nil
}
