package world

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Governance churn: the edits a real estate's governance registries see, made as their writers make them (the
// registry row, then its registry_changelog row), so that the demo's verdicts visibly move. Each kind is one
// trigger GCOS follows; the weights say how often each is drawn.

// GovernanceKind is one kind of governance edit the demo's churn makes.
type GovernanceKind struct {
	Name   string
	Weight int
	apply  func(ctx context.Context, st *churnState, tx pgx.Tx) (string, error)
}

// GovernanceKinds are the kinds the churn draws from, with their weights.
var GovernanceKinds = []GovernanceKind{
	{"retire", 3, lifecycleEdit("retire", "retired")},
	{"supersede", 2, lifecycleEdit("supersede", "superseded")},
	{"merge", 1, lifecycleEdit("merge", "merged")},
	{"coverage", 2, coverageEdit},
	{"owner_assigned", 2, ownerAssigned},
	{"owner_moved", 1, ownerMoved},
	{"owner_revoked", 1, ownerRevoked},
	{"owner_dispute", 1, ownerDispute},
	{"exception_granted", 2, exceptionGranted},
	{"untrusted_row", 1, untrustedRow},
}

// governanceWriter is who the churn's registry edits are logged as.
const governanceWriter = "registry-sync"

func changelogRow(ctx context.Context, tx pgx.Tx, entityType, code, action, by string) error {
	_, err := tx.Exec(ctx, `INSERT INTO registry_changelog (entity_type, entity_code, action, changed_by, alert_detail)
		VALUES ($1, $2, $3, $4, 'demo governance churn')`, entityType, code, action, by)
	return err
}

// lifecycleEdit moves a recent active object to status, with the changelog row of action.
func lifecycleEdit(action, status string) func(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	return func(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
		for range 8 {
			if len(st.recent) == 0 {
				break
			}
			i := st.r.IntN(len(st.recent))
			k := st.recent[i]
			if k.status != statusActive {
				continue
			}
			tag, err := tx.Exec(ctx, `UPDATE birth_registry SET status = $3 WHERE collection_name = $1 AND entity_code = $2 AND status = 'active'`,
				k.collection, k.code, status)
			if err != nil {
				return "", err
			}
			st.recent[i].status = status
			if tag.RowsAffected() == 0 {
				continue
			}
			return fmt.Sprintf("%s %s:%s", action, k.collection, k.code), changelogRow(ctx, tx, k.entityType, k.code, action, governanceWriter)
		}
		return "", errNothingToEdit
	}
}

var errNothingToEdit = errors.New("nothing to edit")

// one reads one row of sql (ORDER BY random() LIMIT 1 over a small registry), or errNothingToEdit.
func one(ctx context.Context, tx pgx.Tx, sql string, dest ...any) error {
	err := tx.QueryRow(ctx, sql).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return errNothingToEdit
	}
	return err
}

func coverageEdit(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	var coll string
	if err := one(ctx, tx, `SELECT collection_name FROM collection_registry ORDER BY random() LIMIT 1`, &coll); err != nil {
		return "", err
	}
	// Mostly back and forth between required and deferred, the way a review queue moves a collection.
	status := []string{"BIRTH_REQUIRED", "BIRTH_REQUIRED", "BIRTH_DEFERRED_NEEDS_REVIEW", "BIRTH_EXEMPT_SYSTEM"}[st.r.IntN(4)]
	if _, err := tx.Exec(ctx, `UPDATE collection_registry SET coverage_status = $2 WHERE collection_name = $1`, coll, status); err != nil {
		return "", err
	}
	return fmt.Sprintf("collection %s → %s", coll, status), changelogRow(ctx, tx, "collection", coll, "update", governanceWriter)
}

// orphanSQL picks a relevant high-risk group that no owner covers in its scope: what a governance team assigns.
const orphanSQL = `SELECT scope, object_class, source_registry FROM v_candidate_effective
	WHERE coverage_outcome = 'orphan' AND lifecycle_status = 'active' ORDER BY random() LIMIT 1`

func ownerAssigned(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	var scope, class, coll string
	if err := one(ctx, tx, orphanSQL, &scope, &class, &coll); err != nil {
		return "", err
	}
	var id int64
	owner := fmt.Sprintf("team-demo-%d", st.r.IntN(100))
	if err := tx.QueryRow(ctx, `INSERT INTO governance_object_ownership (scope_code, entity_type, owner_ref) VALUES ($1, $2, $3)
		RETURNING id`, scope, class, owner).Scan(&id); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s owns %s in %s", owner, class, scope), changelogRow(ctx, tx, "ownership", fmt.Sprint(id), "create", governanceWriter)
}

func ownerMoved(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	var id int64
	if err := one(ctx, tx, `SELECT id FROM governance_object_ownership WHERE status = 'active' ORDER BY random() LIMIT 1`, &id); err != nil {
		return "", err
	}
	owner := fmt.Sprintf("team-demo-%d", st.r.IntN(100))
	if _, err := tx.Exec(ctx, `UPDATE governance_object_ownership SET owner_ref = $2 WHERE id = $1`, id, owner); err != nil {
		return "", err
	}
	return fmt.Sprintf("ownership %d moved to %s", id, owner), changelogRow(ctx, tx, "ownership", fmt.Sprint(id), "update", governanceWriter)
}

func ownerRevoked(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	var id int64
	if err := one(ctx, tx, `SELECT id FROM governance_object_ownership WHERE status = 'active' ORDER BY random() LIMIT 1`, &id); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `UPDATE governance_object_ownership SET status = 'revoked' WHERE id = $1`, id); err != nil {
		return "", err
	}
	return fmt.Sprintf("ownership %d revoked", id), changelogRow(ctx, tx, "ownership", fmt.Sprint(id), "update", governanceWriter)
}

// ownerDispute adds a rival owner as specific as an existing one: the owner resolver names no owner (fail closed).
func ownerDispute(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	var scope, coll string
	if err := one(ctx, tx, `SELECT scope_code, collection_name FROM governance_object_ownership
		WHERE status = 'active' AND entity_type IS NULL AND collection_name IS NOT NULL ORDER BY random() LIMIT 1`, &scope, &coll); err != nil {
		return "", err
	}
	var id int64
	owner := fmt.Sprintf("team-rival-%d", st.r.IntN(100))
	if err := tx.QueryRow(ctx, `INSERT INTO governance_object_ownership (scope_code, collection_name, owner_ref) VALUES ($1, $2, $3)
		RETURNING id`, scope, coll, owner).Scan(&id); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s disputes %s in %s", owner, coll, scope), changelogRow(ctx, tx, "ownership", fmt.Sprint(id), "create", governanceWriter)
}

// exceptionGranted grants an orphan group an exception that expires within minutes: its coverage moves twice.
func exceptionGranted(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	var scope, class, coll string
	if err := one(ctx, tx, orphanSQL, &scope, &class, &coll); err != nil {
		return "", err
	}
	id := fmt.Sprintf("EXC-DEMO-%d-%d", time.Now().UnixNano(), st.r.IntN(1000))
	life := time.Duration(60+st.r.IntN(240)) * time.Second
	if _, err := tx.Exec(ctx, `INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, approval_ref, expires_at)
		VALUES ($1, $2, $3, $4, 'APR-DEMO', now() + $5::interval)`, id, scope, class, coll, life); err != nil {
		return "", err
	}
	return fmt.Sprintf("exception %s on %s in %s for %s", id, class, scope, life), changelogRow(ctx, tx, "exception", id, "create", governanceWriter)
}

// untrustedRow logs a change with no writer: GCOS quarantines it (untrusted_source) instead of acting on it.
func untrustedRow(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	if len(st.recent) == 0 {
		return "", errNothingToEdit
	}
	k := st.recent[st.r.IntN(len(st.recent))]
	return fmt.Sprintf("unsigned update of %s:%s", k.collection, k.code), changelogRow(ctx, tx, k.entityType, k.code, "update", "")
}

// rulesEdit flips one class's coverage_required in the coverage profile: the rule registries move, and a ruleset
// computed now is a new draft an operator can activate.
func rulesEdit(ctx context.Context, st *churnState, tx pgx.Tx) (string, error) {
	var class string
	if err := one(ctx, tx, `SELECT entity_type FROM governance_coverage_profile ORDER BY random() LIMIT 1`, &class); err != nil {
		return "", err
	}
	if _, err := tx.Exec(ctx, `UPDATE governance_coverage_profile SET coverage_required = NOT coalesce(coverage_required, true)
		WHERE entity_type = $1`, class); err != nil {
		return "", err
	}
	return "coverage_required of " + class + " flipped", nil
}

// governanceEdit makes one governance edit of a kind drawn by weight, in its own transaction.
func (st *churnState) governanceEdit(ctx context.Context) (kind, what string, err error) {
	total := 0
	for _, k := range GovernanceKinds {
		total += k.Weight
	}
	w := st.r.IntN(total)
	var pick GovernanceKind
	for _, k := range GovernanceKinds {
		if w -= k.Weight; w < 0 {
			pick = k
			break
		}
	}
	err = pgx.BeginFunc(ctx, st.pool, func(tx pgx.Tx) error {
		var err error
		what, err = pick.apply(ctx, st, tx)
		return err
	})
	return pick.Name, what, err
}
