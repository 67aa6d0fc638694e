package oracle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/postgres"
)

// Birth is one row of the born-object inventory, as the source binding names its columns, with where its parent
// chain ends: the reference reads births one by one only where an object row or a gate decision needs them.
type Birth struct {
	ID           int64
	Code         string
	Collection   string
	Class        string
	Status       string
	Parent       *string
	Canonical    *string
	SourceSystem *string
	// The anchor is the top of the parent chain within the collection (the birth itself when it has no parent): a
	// birth belongs to its anchor's base group (SPEC §4). ParentFound is false when its own parent is not born.
	AnchorClass, AnchorStatus string
	ParentFound               bool
}

// Ref is the object's reference, collection:code.
func (b Birth) Ref() string { return b.Collection + ":" + b.Code }

// Key is the object's candidate key: its canonical address when it has one, else its reference (SPEC §3.2).
func (b Birth) Key() string {
	if b.Canonical != nil && *b.Canonical != "" {
		return *b.Canonical
	}
	return b.Ref()
}

// Base is one base group counted from the source: how many births have an anchor of this class, collection and
// lifecycle. Each base is one group in every scope.
type Base struct {
	Class, Collection, Lifecycle string
	Members                      int64
}

// Substrate is everything the reference evaluator reads, all at one instant. Its size is O(base groups + births
// read one by one), never O(births): the members are counted by the database.
type Substrate struct {
	At             time.Time // the database clock of the read
	RulesetVersion string    // the active ruleset ("" when none is active)
	// Only names the collections the read was limited to (a slice of the audit's rotating cover); nil is all of them.
	Only  []string
	Bases []Base
	// Births are the births read one by one, by id: every birth that may have an object row (a root of a row class,
	// one an exception names, the subject of an open input finding) and those the gate is asked about.
	Births           []Birth
	Collections      map[string]gcos.CollectionRow
	Classes          map[string]bool // meta_catalog entity types
	OwnershipPresent bool
	Ownership        []gcos.OwnershipRow
	Exceptions       []gcos.ExceptionRow
	// Fingerprints holds the current fingerprint of every object an exception names (by collection, code); an
	// object with no birth has none.
	Fingerprints map[[2]string]string
	// InputFindings are the open input findings by subject (an object's reference or candidate key): the
	// input-quality state each one holds its object in.
	InputFindings map[string]gcos.InputQuality
}

// ReadOptions say which births the read takes one by one, besides those that may have an object row.
type ReadOptions struct {
	// RowClasses are the classes whose roots have an object row by their class (RowClasses of the ruleset).
	RowClasses []string
	Only       []string // limit the read to these collections (nil: all)
	Sample     int      // how many births to draw for the gate: children, and bases by their first birth, by Seed
	Seed       uint64
	Also       []string // objects (collection:code) read in any case
}

// ActiveRuleset reads the active ruleset's version through q, a transaction or a pool ("" when none is active).
func ActiveRuleset(ctx context.Context, q interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}) (string, error) {
	var v string
	if err := q.QueryRow(ctx, `SELECT coalesce((SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'), '')`).
		Scan(&v); err != nil {
		return "", fmt.Errorf("read the active ruleset: %w", err)
	}
	return v, nil
}

// withinSQL is the condition that limits a read of the births (alias t) to the collections in only, and the value of
// its parameter $1: nil reads every collection (the condition is then true, so the planner never weighs it).
func withinSQL(only []string) (string, any) {
	if only == nil {
		return "$1::text[] IS NULL", nil
	}
	return "t.{coll} = ANY($1::text[])", only
}

// maxAnchorHops bounds the walk up a parent chain, so a cycle of parent codes ends.
const maxAnchorHops = 1000

// anchorSQL is the walk up every parent chain that starts at a birth of seed (ctes define it, a CTE selecting the
// binding's birth columns as id, code, coll, class, status, parent): one row per birth with its anchor's class and
// status and how many steps it took. Each step is one probe of the source's (collection, code) index, never a join
// the planner could turn into hashing the whole inventory. A chain ends at a birth with no parent, at one whose parent is not
// born in its collection, at one that is its own parent, or after maxAnchorHops steps (a cycle).
func anchorSQL(b postgres.BirthBinding, ctes string) string {
	return fmt.Sprintf(`WITH RECURSIVE %s,
	walk AS (
		SELECT id, coll, code, parent, class, status, 0 AS hops FROM seed
		UNION ALL
		SELECT w.id, w.coll, a.code, a.parent, a.class, a.status, w.hops + 1
		FROM walk w CROSS JOIN LATERAL (`, ctes) + b.SQL(`
		    SELECT p.{code} AS code, p.{parent} AS parent, p.{type} AS class, p.{status} AS status FROM {t} p
		    WHERE p.{coll} = w.coll AND p.{code} = w.parent AND p.{code} <> w.code LIMIT 1) a`) + fmt.Sprintf(`
		WHERE w.hops < %d),
	anchor AS (SELECT DISTINCT ON (id) id, class, status, hops FROM walk ORDER BY id, hops DESC)`, maxAnchorHops)
}

// birthColumns selects the binding's birth columns of table alias t under the names anchorSQL's seed gives them,
// then the ones only a birth read one by one needs (placeholders of postgres.BirthBinding).
const birthColumns = `t.{id} AS id, t.{code} AS code, t.{coll} AS coll, t.{type} AS class, t.{status} AS status, ` +
	`t.{parent} AS parent, t.{canon} AS canonical, t.{src} AS source_system`

// refPairs splits object references (collection:code) into every (collection, code) they can name: a collection's
// name may itself hold a colon, so each colon is tried.
func refPairs(refs []string) (colls, codes []string) {
	for _, r := range refs {
		for i := 0; i < len(r); i++ {
			if r[i] == ':' && i > 0 && i < len(r)-1 {
				colls, codes = append(colls, r[:i]), append(codes, r[i+1:])
			}
		}
	}
	return colls, codes
}

// Read reads the substrate in tx, which should be REPEATABLE READ so that every table is seen at one instant.
// fingerprintSQL reads one object's fingerprint by collection ($1) and code ($2) (postgres.BirthBinding.ObjectFingerprintSQL).
// The members of every base group are counted in the database; births are read one by one only where opts asks.
func Read(ctx context.Context, tx pgx.Tx, binding gcos.SourceBinding, fingerprintSQL string, opts ReadOptions) (Substrate, error) {
	s := Substrate{Only: opts.Only, Collections: map[string]gcos.CollectionRow{}, Classes: map[string]bool{},
		Fingerprints: map[[2]string]string{}, InputFindings: map[string]gcos.InputQuality{}}
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&s.At); err != nil {
		return s, fmt.Errorf("read the database clock: %w", err)
	}
	// The walk up parent chains has no good row estimate, and on a high estimate PostgreSQL compiles the statements
	// with JIT, which costs more than running them (1.9 s against 0.3 s for a slice of 356k births).
	if _, err := tx.Exec(ctx, `SET LOCAL jit = off; SET LOCAL work_mem = '64MB'`); err != nil {
		return s, fmt.Errorf("turn JIT off for the read: %w", err)
	}
	var err error
	if s.RulesetVersion, err = ActiveRuleset(ctx, tx); err != nil {
		return s, err
	}
	if err := each(ctx, tx, `SELECT collection_name, coverage_status, scope_class FROM collection_registry`, func(r pgx.Rows) error {
		var c gcos.CollectionRow
		if err := r.Scan(&c.CollectionName, &c.CoverageStatus, &c.ScopeClass); err != nil {
			return err
		}
		s.Collections[c.CollectionName] = c
		return nil
	}); err != nil {
		return s, fmt.Errorf("read collection_registry: %w", err)
	}
	if err := each(ctx, tx, `SELECT entity_type FROM meta_catalog`, func(r pgx.Rows) error {
		var class string
		if err := r.Scan(&class); err != nil {
			return err
		}
		s.Classes[class] = true
		return nil
	}); err != nil {
		return s, fmt.Errorf("read meta_catalog: %w", err)
	}
	if s.OwnershipPresent, err = exists(ctx, tx, postgres.Quote(binding.OwnerScope.Table)); err != nil {
		return s, err
	}
	if s.OwnershipPresent {
		if err := each(ctx, tx, postgres.RegistryNames(binding).SQL(`SELECT id, scope_code, entity_type, collection_name,
			{owner_ref}, coalesce(status, 'active') FROM {ownership} ORDER BY id`), func(r pgx.Rows) error {
			var o gcos.OwnershipRow
			if err := r.Scan(&o.ID, &o.ScopeCode, &o.EntityType, &o.CollectionName, &o.OwnerRef, &o.Status); err != nil {
				return err
			}
			s.Ownership = append(s.Ownership, o)
			return nil
		}); err != nil {
			return s, fmt.Errorf("read %s: %w", binding.OwnerScope.Table, err)
		}
	}
	if ok, err := exists(ctx, tx, gcos.TableExceptions); err != nil {
		return s, err
	} else if ok {
		if err := each(ctx, tx, `SELECT exception_id, scope_code, entity_type, collection_name, entity_code, approval_ref,
			expires_at, fingerprint, coalesce(status, '') FROM governance_exception ORDER BY exception_id`, func(r pgx.Rows) error {
			var x gcos.ExceptionRow
			if err := r.Scan(&x.ExceptionID, &x.ScopeCode, &x.EntityType, &x.CollectionName, &x.EntityCode, &x.ApprovalRef,
				&x.ExpiresAt, &x.Fingerprint, &x.Status); err != nil {
				return err
			}
			s.Exceptions = append(s.Exceptions, x)
			return nil
		}); err != nil {
			return s, fmt.Errorf("read governance_exception: %w", err)
		}
	}
	for _, x := range s.Exceptions {
		if x.CollectionName == nil || x.EntityCode == nil {
			continue
		}
		k := [2]string{*x.CollectionName, *x.EntityCode}
		if _, done := s.Fingerprints[k]; done {
			continue
		}
		var fp *string
		if err := tx.QueryRow(ctx, fingerprintSQL, k[0], k[1]).Scan(&fp); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return s, fmt.Errorf("read the fingerprint of %s:%s: %w", k[0], k[1], err)
		}
		if fp != nil {
			s.Fingerprints[k] = *fp
		}
	}

	// An open input finding holds its object in needs_input (SPEC §7); its coalesce key is gov:input:<state>:<subject>.
	const prefix = "gov:input:"
	if err := each(ctx, tx, `SELECT coalesce_key FROM system_issues WHERE status = 'open' AND coalesce_key LIKE 'gov:input:%' ORDER BY id`,
		func(r pgx.Rows) error {
			var key string
			if err := r.Scan(&key); err != nil {
				return err
			}
			state, subject, ok := strings.Cut(strings.TrimPrefix(key, prefix), ":")
			q, err := gcos.ParseInputQuality(state)
			if !ok || subject == "" || err != nil || q == gcos.InputAccepted {
				return nil
			}
			if _, dup := s.InputFindings[subject]; !dup {
				s.InputFindings[subject] = q
			}
			return nil
		}); err != nil {
		return s, fmt.Errorf("read open input findings: %w", err)
	}
	if err := readBirths(ctx, tx, binding, opts, &s); err != nil {
		return s, err
	}
	return s, nil
}

// readBirths counts the members of every base group and reads, by id and with its anchor, every birth that may
// have an object row (a root of a row class, one an exception names, the subject of an open input finding), a
// sample for the gate and opts.Also, in one pass over the births (of opts.Only's collections).
//
// The pass is one aggregate: the roots of a base that nothing names are counted in one group per base, and every
// other birth (a child, or a birth wanted one by one) is a group of its own, keyed by its id, so the same scan
// yields the counts and the births to read. Each child is then walked up its parent chain and counts in its
// anchor's base. The sample is opts.Sample of the children and bases (a base by its first birth), by the hash of
// the id under the seed. Births named one by one are each one probe of the (collection, code) index: joined,
// PostgreSQL may sort the whole slice to merge them (7 s for 11k names among 10M births).
func readBirths(ctx context.Context, tx pgx.Tx, binding gcos.SourceBinding, opts ReadOptions, s *Substrate) error {
	b := postgres.NewBirthBinding(binding)
	var named []string
	for _, x := range s.Exceptions {
		if x.CollectionName != nil && x.EntityCode != nil {
			named = append(named, *x.CollectionName+":"+*x.EntityCode)
		}
	}
	subjects := make([]string, 0, len(s.InputFindings))
	for subject := range s.InputFindings {
		subjects = append(subjects, subject)
	}
	colls, codes := refPairs(slices.Concat(named, subjects, opts.Also))
	within, only := withinSQL(opts.Only)
	wanted := `((t.{parent} IS NULL AND t.{type} = ANY($2::text[])) OR t.{canon} = ANY($5::text[]))`
	ctes := b.SQL(`scanned AS (
		SELECT t.{type} AS class, t.{coll} AS coll, t.{status} AS status, CASE WHEN one THEN t.{id} END AS id, count(*) AS n,
		       bool_or(wanted) AS wanted, bool_or(t.{parent} IS NOT NULL) AS child, min(t.{id}) AS pick
		FROM {t} t CROSS JOIN LATERAL (SELECT ` + wanted + ` AS wanted, t.{parent} IS NOT NULL OR ` + wanted + ` AS one) w
		WHERE ` + within + ` GROUP BY 1, 2, 3, 4),
	sampled AS (SELECT pick FROM scanned WHERE NOT wanted ORDER BY hashint8(pick # $6::bigint), pick LIMIT $7::bigint),
	seed AS (
		SELECT t.*, x.wanted FROM scanned x CROSS JOIN LATERAL (SELECT ` + birthColumns + ` FROM {t} t WHERE t.{id} = x.id LIMIT 1) t
		WHERE x.id IS NOT NULL
		UNION ALL
		SELECT t.*, true FROM sampled x CROSS JOIN LATERAL (SELECT ` + birthColumns + ` FROM {t} t WHERE t.{id} = x.pick LIMIT 1) t
		UNION ALL
		SELECT t.*, true FROM unnest($3::text[], $4::text[]) AS n(coll, code) CROSS JOIN LATERAL (
		    SELECT ` + birthColumns + ` FROM {t} t WHERE t.{coll} = n.coll AND t.{code} = n.code AND ` + within + ` LIMIT 1) t)`)
	q := anchorSQL(b, ctes) + `,
	counted AS (
		SELECT class, coll, status, n FROM scanned WHERE NOT child
		UNION ALL
		SELECT a.class, s.coll, a.status, 1 FROM scanned s JOIN anchor a ON a.id = s.id WHERE s.child),
	one AS (
		SELECT DISTINCT ON (s.id) s.id, s.code, s.coll, s.class, s.status, s.parent, s.canonical, s.source_system,
		       a.class AS anchor_class, a.status AS anchor_status, a.hops > 0 OR s.parent IS NULL OR s.parent = s.code AS found
		FROM seed s JOIN anchor a ON a.id = s.id WHERE s.wanted ORDER BY s.id)
	SELECT NULL::bigint, NULL::text, coll, class, status, NULL::text, NULL::text, NULL::text, NULL::text, NULL::text, NULL::boolean,
	       sum(n)::bigint FROM counted GROUP BY class, coll, status
	UNION ALL
	(SELECT id, code, coll, class, status, parent, canonical, source_system, anchor_class, anchor_status, found, NULL::bigint
	 FROM one ORDER BY id)`
	var one Birth
	var birthID *int64
	var code0, parent, canonical, source, anchorClass, anchorStatus *string
	var found *bool
	var members *int64
	// The planner cannot know that the aggregate has O(bases + births read one by one) groups, and would sort every
	// birth to group them (an external sort of 1M rows: 1.7 s); hashed, they take one pass.
	if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = off`); err != nil {
		return fmt.Errorf("prefer hashing the births: %w", err)
	}
	rows, err := tx.Query(ctx, q, only, opts.RowClasses, colls, codes, subjects, int64(opts.Seed>>1), max(opts.Sample, 0))
	if err != nil {
		return fmt.Errorf("count the members of every base group and read births one by one: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&birthID, &code0, &one.Collection, &one.Class, &one.Status, &parent, &canonical,
		&source, &anchorClass, &anchorStatus, &found, &members}, func() error {
		if birthID == nil {
			s.Bases = append(s.Bases, Base{Class: one.Class, Collection: one.Collection, Lifecycle: one.Status, Members: *members})
			return nil
		}
		one.ID, one.Code, one.Parent, one.Canonical, one.SourceSystem = *birthID, *code0, parent, canonical, source
		one.AnchorClass, one.AnchorStatus, one.ParentFound = *anchorClass, *anchorStatus, *found
		s.Births = append(s.Births, one)
		return nil
	}); err != nil {
		return fmt.Errorf("count the members of every base group and read births one by one: %w", err)
	}
	slices.SortFunc(s.Births, func(a, b Birth) int { return cmp.Compare(a.ID, b.ID) })
	if _, err := tx.Exec(ctx, `SET LOCAL enable_sort = on`); err != nil {
		return fmt.Errorf("sort again: %w", err)
	}
	return nil
}

func each(ctx context.Context, tx pgx.Tx, sql string, row func(pgx.Rows) error, args ...any) error {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

func exists(ctx context.Context, tx pgx.Tx, table string) (bool, error) {
	var ok bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		return false, fmt.Errorf("check table %s: %w", table, err)
	}
	return ok, nil
}
