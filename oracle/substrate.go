package oracle

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Birth is one row of the born-object inventory, as the source binding names its columns.
type Birth struct {
	ID           int64
	Code         string
	Collection   string
	Class        string
	Status       string
	Parent       *string
	Canonical    *string
	SourceSystem *string
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

// Substrate is everything the reference evaluator reads, all at one instant.
type Substrate struct {
	At               time.Time // the database clock of the read
	RulesetVersion   string    // the active ruleset ("" when none is active)
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

// Read reads the substrate in tx, which should be REPEATABLE READ so that every table is seen at one instant.
// fingerprintSQL reads one object's fingerprint by collection ($1) and code ($2) (postgres.Store.ObjectFingerprintSQL).
func Read(ctx context.Context, tx pgx.Tx, binding gcos.SourceBinding, fingerprintSQL string) (Substrate, error) {
	s := Substrate{Collections: map[string]gcos.CollectionRow{}, Classes: map[string]bool{},
		Fingerprints: map[[2]string]string{}, InputFindings: map[string]gcos.InputQuality{}}
	if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&s.At); err != nil {
		return s, fmt.Errorf("read the database clock: %w", err)
	}
	if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT ruleset_version FROM governance_ruleset WHERE status = 'active'), '')`).
		Scan(&s.RulesetVersion); err != nil {
		return s, fmt.Errorf("read the active ruleset: %w", err)
	}
	id := func(name string) string { return pgx.Identifier{name}.Sanitize() }
	b := binding.Birth
	rows, err := tx.Query(ctx, fmt.Sprintf(`SELECT %s, %s, %s, %s, %s, %s, %s, %s FROM %s`,
		id(b.ID), id(b.EntityCode), id(binding.SourceRegistry.Column), id(binding.ObjectClass.Column),
		id(binding.LifecycleStatus.Column), id(b.ParentCode), id(b.CanonicalAddress), id(b.SourceSystem), id(b.Table)))
	if err != nil {
		return s, fmt.Errorf("read births: %w", err)
	}
	var one Birth
	if _, err := pgx.ForEachRow(rows, []any{&one.ID, &one.Code, &one.Collection, &one.Class, &one.Status, &one.Parent,
		&one.Canonical, &one.SourceSystem}, func() error {
		s.Births = append(s.Births, one)
		return nil
	}); err != nil {
		return s, fmt.Errorf("read births: %w", err)
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
	if s.OwnershipPresent, err = exists(ctx, tx, gcos.TableOwnership); err != nil {
		return s, err
	}
	if s.OwnershipPresent {
		if err := each(ctx, tx, `SELECT id, scope_code, entity_type, collection_name, owner_ref, coalesce(status, 'active')
			FROM governance_object_ownership ORDER BY id`, func(r pgx.Rows) error {
			var o gcos.OwnershipRow
			if err := r.Scan(&o.ID, &o.ScopeCode, &o.EntityType, &o.CollectionName, &o.OwnerRef, &o.Status); err != nil {
				return err
			}
			s.Ownership = append(s.Ownership, o)
			return nil
		}); err != nil {
			return s, fmt.Errorf("read governance_object_ownership: %w", err)
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
	return s, nil
}

func each(ctx context.Context, tx pgx.Tx, sql string, row func(pgx.Rows) error) error {
	rows, err := tx.Query(ctx, sql)
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
