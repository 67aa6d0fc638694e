package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// registry_changelog is the one audit channel. GCOS's own rows use entity_type 'governance_*' and changed_by
// 'gcos:<actor>' for readers, but the intake recognises its own echo by id: every row written here is recorded in
// governance_audit_row in the same transaction, which no other writer of the ledger can forge by naming itself.

const auditInsertSQL = `
WITH row AS (
    INSERT INTO registry_changelog (entity_type, entity_code, action, "timestamp", alert_level, resolved, changed_by, alert_detail)
    VALUES ($1, $2, $3, now(), $4, true, $5, $6)
    RETURNING id
), own AS (
    INSERT INTO governance_audit_row (changelog_id) SELECT id FROM row
)
SELECT id FROM row`

// AuditEntry is one audit row.
type AuditEntry struct {
	EntityType string // governance_snapshot, governance_ruleset, governance_intake, governance_dlq, governance_prune, ...
	EntityCode string
	Action     string
	AlertLevel string // info unless stated
	Actor      string
	Detail     map[string]any
}

// Audit writes one registry_changelog row inside tx and returns its id.
func Audit(ctx context.Context, tx pgx.Tx, e AuditEntry) (int64, error) {
	detail, err := json.Marshal(e.Detail)
	if err != nil {
		return 0, fmt.Errorf("audit %s %s: %w", e.EntityType, e.Action, err)
	}
	level := e.AlertLevel
	if level == "" {
		level = "info"
	}
	actor := e.Actor
	if actor == "" {
		actor = "gcos"
	}
	var id int64
	if err := tx.QueryRow(ctx, auditInsertSQL, e.EntityType, e.EntityCode, e.Action, level, "gcos:"+actor, string(detail)).Scan(&id); err != nil {
		return 0, fmt.Errorf("audit %s %s: %w", e.EntityType, e.Action, err)
	}
	return id, nil
}

// LinkAudit points the audit_ref of the candidate rows an audited operation wrote (those under ruleset matching
// where, whose $3 is arg) at the operation's audit row (doc 40 §40.4: the registry_changelog linkage). Event and
// incremental scans write no audit row and leave the link as it was.
func LinkAudit(ctx context.Context, tx pgx.Tx, table, ruleset string, auditID int64, where string, arg any) error {
	if auditID == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE `+table+` SET audit_ref = $2::text WHERE ruleset_version = $1 AND `+where+`
		AND audit_ref IS DISTINCT FROM $2::text`, ruleset, strconv.FormatInt(auditID, 10), arg); err != nil {
		return fmt.Errorf("link %s to audit row %d: %w", table, auditID, err)
	}
	return nil
}
