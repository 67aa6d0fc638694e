package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// Querier is what read helpers need: a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const (
	collectionsSQL   = `SELECT collection_name, coverage_status, scope_class FROM collection_registry`
	classesSQL       = `SELECT entity_type, registry_collection FROM meta_catalog`
	profileSQL       = `SELECT entity_type, risk_class, coverage_required, privacy, coalesce(independently_authoritative, false), coalesce(write_path, false) FROM governance_coverage_profile`
	pivotsSQL        = `SELECT pivot_code, {axis_family}, {pivot_class} FROM {pivots}`
	jurisdictionsSQL = `SELECT law_code, scope_code, entity_type, collection_name FROM law_jurisdiction`
	scopesSQL        = `SELECT {scope_code}, default_owner_hint FROM {scopes}`
	ownershipSQL     = `SELECT id, scope_code, entity_type, collection_name, {owner_ref}, coalesce(status, 'active') FROM {ownership}`
	exceptionsSQL    = `SELECT exception_id, scope_code, entity_type, collection_name, entity_code, approval_ref, expires_at, fingerprint, coalesce(status, '') FROM governance_exception`
	measurementsSQL  = `SELECT measurement_id, law_code, method, source_query, target_query, comparison, severity FROM measurement_registry WHERE enabled ORDER BY measurement_id`
)

// RegistryNames binds the governance registries' placeholders to the source binding: {pivots} with its
// {axis_family} and {pivot_class} (the class a pivot belongs to), {scopes} with {scope_code}, {ownership} with
// {owner_ref}. The registries' other columns are the substrate's (verified at start against the bound tables).
func RegistryNames(sb gcos.SourceBinding) Names {
	return Names{
		"pivots": {sb.AxisFamily.Table}, "axis_family": {sb.AxisFamily.Column}, "pivot_class": {sb.AxisFamily.KeyColumn},
		"scopes": {sb.Scope.Table}, "scope_code": {sb.Scope.Column},
		"ownership": {sb.OwnerScope.Table}, "owner_ref": {sb.OwnerScope.Column},
	}
}

// registryExists reports whether the table a registry (named by its default table) is bound to exists.
func registryExists(ctx context.Context, q Querier, sb gcos.SourceBinding, registry string) (bool, error) {
	return TableExists(ctx, q, Quote(sb.RegistryTable(registry)))
}

// TableExists reports whether the table name (schema-qualified or on the search path) exists.
func TableExists(ctx context.Context, q Querier, name string) (bool, error) {
	var ok bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		return false, fmt.Errorf("check table %s: %w", name, err)
	}
	return ok, nil
}

// loadRegistries reads every registry GCOS derives groups, facts and rulesets from. Run it inside one
// transaction so all registries are seen at one instant.
// Registries absent are reported by registry name (the default table), whichever table the binding names.
func loadRegistries(ctx context.Context, q Querier, sb gcos.SourceBinding) (gcos.Registries, error) {
	names := RegistryNames(sb)
	r := gcos.Registries{
		Collections: map[string]gcos.CollectionRow{},
		Classes:     map[string]*string{},
		Profile:     map[string]gcos.CoverageProfileRow{},
	}
	collect := func(table, sql string, optional bool, scan func(pgx.Rows) error) error {
		if optional {
			ok, err := registryExists(ctx, q, sb, table)
			if err != nil {
				return err
			}
			if !ok {
				r.Absent = append(r.Absent, table)
				return nil
			}
		}
		bound := sb.RegistryTable(table)
		rows, err := q.Query(ctx, names.SQL(sql))
		if err != nil {
			return fmt.Errorf("read %s: %w", bound, err)
		}
		defer rows.Close()
		for rows.Next() {
			if err := scan(rows); err != nil {
				return fmt.Errorf("read %s: %w", bound, err)
			}
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read %s: %w", bound, err)
		}
		return nil
	}
	steps := []error{
		collect("collection_registry", collectionsSQL, false, func(rows pgx.Rows) error {
			var c gcos.CollectionRow
			err := rows.Scan(&c.CollectionName, &c.CoverageStatus, &c.ScopeClass)
			r.Collections[c.CollectionName] = c
			return err
		}),
		collect("meta_catalog", classesSQL, false, func(rows pgx.Rows) error {
			var class string
			var coll *string
			err := rows.Scan(&class, &coll)
			r.Classes[class] = coll
			return err
		}),
		collect(gcos.TableCoverageProfile, profileSQL, true, func(rows pgx.Rows) error {
			var p gcos.CoverageProfileRow
			err := rows.Scan(&p.EntityType, &p.RiskClass, &p.CoverageRequired, &p.Privacy, &p.IndependentlyAuthoritative, &p.WritePath)
			r.Profile[p.EntityType] = p
			return err
		}),
		collect(gcos.TablePivots, pivotsSQL, true, func(rows pgx.Rows) error {
			var p gcos.PivotRow
			err := rows.Scan(&p.PivotCode, &p.AxisFamily, &p.EntityType)
			r.Pivots = append(r.Pivots, p)
			return err
		}),
		collect(gcos.TableJurisdiction, jurisdictionsSQL, true, func(rows pgx.Rows) error {
			var j gcos.JurisdictionRow
			err := rows.Scan(&j.LawCode, &j.ScopeCode, &j.EntityType, &j.CollectionName)
			r.Jurisdictions = append(r.Jurisdictions, j)
			return err
		}),
		collect(gcos.TableScopes, scopesSQL, true, func(rows pgx.Rows) error {
			var s gcos.ScopeRow
			err := rows.Scan(&s.ScopeCode, &s.DefaultOwnerHint)
			r.Scopes = append(r.Scopes, s)
			return err
		}),
		collect(gcos.TableOwnership, ownershipSQL, true, func(rows pgx.Rows) error {
			var o gcos.OwnershipRow
			err := rows.Scan(&o.ID, &o.ScopeCode, &o.EntityType, &o.CollectionName, &o.OwnerRef, &o.Status)
			r.Ownership = append(r.Ownership, o)
			return err
		}),
		collect(gcos.TableExceptions, exceptionsSQL, true, func(rows pgx.Rows) error {
			var e gcos.ExceptionRow
			err := rows.Scan(&e.ExceptionID, &e.ScopeCode, &e.EntityType, &e.CollectionName, &e.EntityCode, &e.ApprovalRef, &e.ExpiresAt, &e.Fingerprint, &e.Status)
			r.Exceptions = append(r.Exceptions, e)
			return err
		}),
		collect("measurement_registry", measurementsSQL, false, func(rows pgx.Rows) error {
			var m gcos.MeasurementRule
			err := rows.Scan(&m.MeasurementID, &m.LawCode, &m.Method, &m.SourceQuery, &m.TargetQuery, &m.Comparison, &m.Severity)
			r.Measurements = append(r.Measurements, m)
			return err
		}),
	}
	for _, err := range steps {
		if err != nil {
			return gcos.Registries{}, err
		}
	}
	r.Finish()
	return r, nil
}

// axesUnregisteredSQL lists the axis families groups with members carry that the axis registry no longer holds.
const axesUnregisteredSQL = `
SELECT g.axis_family, count(*), min(g.group_key)
FROM governance_group g
WHERE g.member_count > 0 AND g.axis_family IS NOT NULL
  AND NOT EXISTS (SELECT 1 FROM {pivots} p WHERE p.{axis_family} = g.axis_family)
GROUP BY g.axis_family ORDER BY g.axis_family`

// CheckAxesTx raises axis_unregistered for every axis family that groups with members carry and the axis registry
// (the source binding's axis_family table) no longer holds — a pivot removed behind the groups' backs, until they
// are placed again — one finding per axis, and resolves it for every other axis. Without the axis registry (an
// optional table) nothing is checked.
func CheckAxesTx(ctx context.Context, tx pgx.Tx, sb gcos.SourceBinding, runID, ruleset string) error {
	var present bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, Quote(sb.AxisFamily.Table)).Scan(&present); err != nil {
		return fmt.Errorf("check axes: %w", err)
	}
	if !present {
		return nil
	}
	rows, err := tx.Query(ctx, RegistryNames(sb).SQL(axesUnregisteredSQL))
	if err != nil {
		return fmt.Errorf("check axes: %w", err)
	}
	type axis struct {
		Family string
		Groups int64
		Sample string
	}
	found, err := pgx.CollectRows(rows, pgx.RowToStructByPos[axis])
	if err != nil {
		return fmt.Errorf("check axes: %w", err)
	}
	keep := []string{}
	for _, a := range found {
		keep = append(keep, gcos.CoalesceKey(gcos.IssueAxisUnregistered, a.Family))
		if _, err := RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueAxisUnregistered, Subject: a.Family, RunID: runID,
			RulesetVersion: ruleset, Evidence: map[string]any{"axis_family": a.Family, "groups": a.Groups,
				"sample_group": a.Sample, "registry": sb.AxisFamily.Table}}); err != nil {
			return err
		}
	}
	_, err = ResolveFindingsExceptTx(ctx, tx, gcos.IssueAxisUnregistered, keep)
	return err
}
