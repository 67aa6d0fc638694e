package postgres

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// RulesetRow is one governance_ruleset row.
type RulesetRow struct {
	RulesetBrief
	ContentHash string              `json:"content_hash"`
	Summary     gcos.RulesetSummary `json:"components"`
	Supersedes  *string             `json:"supersedes"`
	// Components are the rows that were hashed (not listed by default: large).
	Components gcos.RulesetComponents `json:"-"`
}

const rulesetColumns = `ruleset_version, content_hash, components, status, proposed_by, proposed_at, activated_at,
	activated_by, approval_ref, supersedes, document`

func scanRuleset(row pgx.Row) (RulesetRow, error) {
	var r RulesetRow
	var summary, document []byte
	if err := row.Scan(&r.Version, &r.ContentHash, &summary, &r.Status, &r.ProposedBy, &r.ProposedAt, &r.ActivatedAt,
		&r.ActivatedBy, &r.ApprovalRef, &r.Supersedes, &document); err != nil {
		return r, err
	}
	if err := json.Unmarshal(summary, &r.Summary); err != nil {
		return r, fmt.Errorf("ruleset %s components: %w", r.Version, err)
	}
	if err := json.Unmarshal(document, &r.Components); err != nil {
		return r, fmt.Errorf("ruleset %s document: %w", r.Version, err)
	}
	return r, nil
}

// currentComponents reads the registries and the configured verdict policy into ruleset components.
func (s *Store) currentComponents(ctx context.Context, q Querier) (gcos.RulesetComponents, gcos.Registries, error) {
	regs, err := loadRegistries(ctx, q, s.cfg.SourceBinding)
	if err != nil {
		return gcos.RulesetComponents{}, regs, err
	}
	policy, err := s.cfg.VerdictPolicy.Load()
	if err != nil {
		return gcos.RulesetComponents{}, regs, fmt.Errorf("verdict policy: %w", err)
	}
	c := regs.RulesetComponents(policy)
	if err := c.Validate(); err != nil {
		return c, regs, err
	}
	return c, regs, nil
}

// ComputeRuleset hashes the current registries and verdict policy into a ruleset version and records it as a
// draft proposed by proposer (GCOS's own steps and tests; a person proposes through ComputeRulesetAs). Computing
// an unchanged ruleset again returns the existing row unchanged.
func (s *Store) ComputeRuleset(ctx context.Context, proposer string) (RulesetRow, bool, error) {
	if proposer == "" {
		return RulesetRow{}, false, gcos.Errorf(gcos.EINVALID, "ruleset compute: --by must name a proposer")
	}
	return s.computeRuleset(ctx, gcos.NamedActor(proposer, ""), nil)
}

// RulesetImpact says what activating a new draft would do, for its ruleset.proposed announcement: it runs in the
// transaction that records the draft (which it sees), and what it returns joins the announcement's payload.
type RulesetImpact func(ctx context.Context, tx pgx.Tx, draft RulesetRow) (map[string]any, error)

// ComputeRulesetAs is ComputeRuleset proposed by a person: with principals configured the proposer must be one
// holding the operator role. The draft records the principal as its proposer (what no-self-approval compares) and
// a new draft writes one audit row naming the actor whole (principal, the name given, OS user, channel).
// A new draft's announcement carries impact's answer (nil: none).
func (s *Store) ComputeRulesetAs(ctx context.Context, by gcos.Actor, impact RulesetImpact) (RulesetRow, bool, error) {
	if err := by.Check("ruleset compute"); err != nil {
		return RulesetRow{}, false, err
	}
	if by.Principal != gcos.SystemProposer {
		if err := gcos.MayAct(s.cfg.Principals, by.Principal, gcos.RoleOperator); err != nil {
			return RulesetRow{}, false, gcos.Errorf(gcos.EFORBIDDEN, "ruleset compute: %s", gcos.ErrorMessage(err))
		}
	}
	return s.computeRuleset(ctx, by, impact)
}

func (s *Store) computeRuleset(ctx context.Context, by gcos.Actor, impact RulesetImpact) (RulesetRow, bool, error) {
	proposer := by.Principal
	var row RulesetRow
	var created bool
	// The registries are read at one instant (a read-only REPEATABLE READ transaction); the draft is recorded in a
	// transaction of its own, so two processes computing the same draft at once both find it, neither fails.
	var comps gcos.RulesetComponents
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		comps, _, err = s.currentComponents(ctx, tx)
		return err
	})
	if err != nil {
		return row, false, fmt.Errorf("ruleset compute: read the registries: %w", err)
	}
	err = s.InTx(ctx, func(tx pgx.Tx) error {
		rs := gcos.ComputeRuleset(comps)
		summary, err := json.Marshal(rs.Summary)
		if err != nil {
			return err
		}
		document, err := json.Marshal(comps)
		if err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `
			INSERT INTO governance_ruleset (ruleset_version, content_hash, components, document, status, proposed_by)
			VALUES ($1, $2, $3, $4, 'draft', $5) ON CONFLICT (ruleset_version) DO NOTHING`,
			rs.Version, rs.ContentHash, summary, document, proposer)
		if err != nil {
			return fmt.Errorf("record ruleset %s: %w", rs.Version, err)
		}
		created = tag.RowsAffected() == 1
		if created && by.Via != "" {
			if _, err := Audit(ctx, tx, AuditEntry{EntityType: "governance_ruleset", EntityCode: rs.Version, Action: "propose",
				Actor: proposer, Detail: map[string]any{"proposer": by.Audit()}}); err != nil {
				return err
			}
		}
		row, err = scanRuleset(tx.QueryRow(ctx, `SELECT `+rulesetColumns+` FROM governance_ruleset WHERE ruleset_version = $1`, rs.Version))
		if err != nil {
			return err
		}
		if row.ContentHash != rs.ContentHash {
			return gcos.Errorf(gcos.ECONFLICT, "ruleset %s: stored content hash %s differs from computed %s (12-hex prefix collision)", rs.Version, row.ContentHash, rs.ContentHash)
		}
		if created {
			payload := map[string]any{"ruleset_version": rs.Version, "status": "draft"}
			if impact != nil {
				more, err := impact(ctx, tx, row)
				if err != nil {
					return fmt.Errorf("ruleset %s: its impact: %w", rs.Version, err)
				}
				maps.Copy(payload, more)
			}
			if err := AnnounceTx(ctx, tx, Emit{EventType: EventRulesetProposed, SubjectTable: "governance_ruleset",
				SubjectRef: rs.Version, CollectionName: "governance_ruleset", EntityCode: rs.Version, ActorRef: proposer,
				CorrelationID: "ruleset:" + rs.Version + ":proposed", Payload: payload}); err != nil {
				return err
			}
		}
		return nil
	})
	return row, created, err
}

// GetRuleset returns one ruleset by version.
func (s *Store) GetRuleset(ctx context.Context, version string) (RulesetRow, error) {
	r, err := scanRuleset(s.pool.QueryRow(ctx, `SELECT `+rulesetColumns+` FROM governance_ruleset WHERE ruleset_version = $1`, version))
	return r, MapError(err, "ruleset "+version)
}

// activeRuleset returns the active ruleset (ENOTFOUND when none is active).
func (s *Store) activeRuleset(ctx context.Context) (RulesetRow, error) {
	r, err := scanRuleset(s.pool.QueryRow(ctx, `SELECT `+rulesetColumns+` FROM governance_ruleset WHERE status = 'active'`))
	return r, MapError(err, "active ruleset")
}

// ListRulesets lists every ruleset, newest first.
func (s *Store) ListRulesets(ctx context.Context) ([]RulesetRow, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+rulesetColumns+` FROM governance_ruleset ORDER BY proposed_at DESC, ruleset_version`)
	if err != nil {
		return nil, fmt.Errorf("list rulesets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (RulesetRow, error) { return scanRuleset(r) })
	if err != nil {
		return nil, fmt.Errorf("list rulesets: %w", err)
	}
	return out, nil
}

// RulesetDiffReport is a diff plus the groups it would dirty.
type RulesetDiffReport struct {
	gcos.RulesetDiff
	Groups      []string `json:"groups"`       // group keys the change would dirty
	GroupsTotal int      `json:"groups_total"` // all known groups, for scale
}

// DiffRulesets compares two recorded rulesets and resolves which known groups the change would dirty.
func (s *Store) DiffRulesets(ctx context.Context, from, to string) (RulesetDiffReport, error) {
	a, err := s.GetRuleset(ctx, from)
	if err != nil {
		return RulesetDiffReport{}, err
	}
	b, err := s.GetRuleset(ctx, to)
	if err != nil {
		return RulesetDiffReport{}, err
	}
	d := gcos.DiffRulesets(a.Components, b.Components)
	d.From, d.To = from, to
	groups, err := s.groupDimensions(ctx, s.pool)
	if err != nil {
		return RulesetDiffReport{}, err
	}
	rep := RulesetDiffReport{RulesetDiff: d, GroupsTotal: len(groups)}
	rep.Groups = selectedKeys(d.Impact, groups)
	return rep, nil
}

func selectedKeys(sel []gcos.GroupSelector, groups []gcos.Group) []string {
	dims := make([]gcos.Dimensions, len(groups))
	for i, g := range groups {
		dims[i] = g.Dimensions
	}
	keys := []string{} // never nil: a diff that selects no group is an empty array in SQL, not NULL
	for _, i := range gcos.SelectGroups(sel, dims) {
		keys = append(keys, groups[i].Key)
	}
	return keys
}

// groupDimensions reads the group registry.
func (s *Store) groupDimensions(ctx context.Context, q Querier) ([]gcos.Group, error) {
	rows, err := q.Query(ctx, `SELECT group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, member_count FROM governance_group ORDER BY group_key`)
	if err != nil {
		return nil, fmt.Errorf("read groups: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (gcos.Group, error) {
		var g gcos.Group
		err := r.Scan(&g.Key, &g.ObjectClass, &g.SourceRegistry, &g.AxisFamily, &g.Scope, &g.LifecycleStatus, &g.OwnerScope, &g.MemberCount)
		return g, err
	})
	if err != nil {
		return nil, fmt.Errorf("read groups: %w", err)
	}
	return out, nil
}

// ActivationResult reports an activation.
type ActivationResult struct {
	Version        string               `json:"ruleset_version"`
	Superseded     *string              `json:"superseded"`
	DirtiedGroups  int                  `json:"dirtied_groups"`
	CarriedGroups  int                  `json:"carried_groups"`
	Unresolved     []string             `json:"unresolved_law_codes"`
	AuditID        int64                `json:"audit_id"`
	ImpactSelector []gcos.GroupSelector `json:"impact"`
	// Token is the consistency token of the activation: a gate question passing it as at_least reads the new
	// ruleset.
	Token string `json:"token"`
}

// activateAttempts bounds how often ActivateRuleset retries a transaction PostgreSQL aborted on a conflict.
const activateAttempts = 5

// ActivateRuleset makes a draft ruleset the active one. It is refused without an approval reference, when actor
// proposed it (no self-approval), and while snapshot_nondeterministic is open. The previous active ruleset becomes
// superseded and is chained in supersedes; the groups in the changed rules' scope are dirtied (ruleset_bump) and
// every other group's verdict is carried to the new version unchanged, because no changed rule can reach it. A
// changed rule whose scope cannot be resolved dirties every group and raises ruleset_drift.
func (s *Store) ActivateRuleset(ctx context.Context, version, approvalRef, actor string) (ActivationResult, error) {
	return s.ActivateRulesetAs(ctx, version, approvalRef, gcos.NamedActor(actor, ""))
}

// ActivateRulesetAs is ActivateRuleset approved by by. No self-approval is decided on principals: by's principal
// must differ from the proposer's (and so must the name it gives), so one token cannot propose under one name and
// approve under another. With principals configured the approver must be one holding the approver role. The
// audit row names the approver whole and the proposer.
func (s *Store) ActivateRulesetAs(ctx context.Context, version, approvalRef string, by gcos.Actor) (ActivationResult, error) {
	res := ActivationResult{Version: version}
	if approvalRef == "" {
		return res, gcos.Errorf(gcos.EINVALID, "activate %s: an approval reference is required (--approval)", version)
	}
	if strings.TrimSpace(by.Principal) == "" {
		return res, gcos.Errorf(gcos.EINVALID, "activate %s: the approving actor is required (--by)", version)
	}
	if err := gcos.MayAct(s.cfg.Principals, by.Principal, gcos.RoleApprover); err != nil {
		return res, gcos.Errorf(gcos.EFORBIDDEN, "activate %s: %s", version, gcos.ErrorMessage(err))
	}
	actor := by.Principal
	frozen, err := s.openFindingExists(ctx, gcos.IssueSnapshotNondeterministic)
	if err != nil {
		return res, err
	}
	if frozen {
		return res, gcos.Errorf(gcos.ECONFLICT, "activate %s: ruleset activation is frozen while a snapshot_nondeterministic finding is open", version)
	}
	activate := func(tx pgx.Tx) error {
		res = ActivationResult{Version: version} // an aborted attempt's results are gone with its transaction
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended('gcos.ruleset.activate', 0))`); err != nil {
			return err
		}
		target, err := scanRuleset(tx.QueryRow(ctx, `SELECT `+rulesetColumns+` FROM governance_ruleset WHERE ruleset_version = $1 FOR UPDATE`, version))
		if err != nil {
			return MapError(err, "ruleset "+version)
		}
		switch target.Status {
		case gcos.RulesetActive:
			return gcos.Errorf(gcos.ECONFLICT, "activate %s: already active", version)
		case gcos.RulesetSuperseded:
			return gcos.Errorf(gcos.ECONFLICT, "activate %s: superseded versions are history; compute the ruleset again to propose it", version)
		}
		if why := gcos.SelfApproval(gcos.Actor{Principal: target.ProposedBy, Name: target.ProposedBy}, by); why != "" {
			return gcos.Errorf(gcos.ECONFLICT, "activate %s: %s", version, why)
		}
		prev, err := scanRuleset(tx.QueryRow(ctx, `SELECT `+rulesetColumns+` FROM governance_ruleset WHERE status = 'active' FOR UPDATE`))
		hasPrev := err == nil
		if err != nil && err != pgx.ErrNoRows {
			return fmt.Errorf("read active ruleset: %w", err)
		}
		if hasPrev {
			if _, err := tx.Exec(ctx, `UPDATE governance_ruleset SET status = 'superseded' WHERE ruleset_version = $1`, prev.Version); err != nil {
				return fmt.Errorf("supersede %s: %w", prev.Version, err)
			}
			res.Superseded = &prev.Version
		}
		if _, err := tx.Exec(ctx, `
			UPDATE governance_ruleset SET status = 'active', activated_at = now(), activated_by = $2, approval_ref = $3, supersedes = $4
			WHERE ruleset_version = $1`, version, actor, approvalRef, res.Superseded); err != nil {
			return MapError(err, "activate "+version)
		}
		if hasPrev {
			d := gcos.DiffRulesets(prev.Components, target.Components)
			res.ImpactSelector, res.Unresolved = d.Impact, d.Unresolved
			if err := s.rebaseCandidates(ctx, tx, prev.Version, version, d.Impact, &res); err != nil {
				return err
			}
			if len(d.Unresolved) > 0 {
				if _, err := RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueRulesetDrift, Subject: version, RulesetVersion: version,
					Evidence: map[string]any{"unresolved_law_codes": d.Unresolved, "from": prev.Version, "to": version, "dirtied": "all groups"}}); err != nil {
					return err
				}
			}
		}
		res.AuditID, err = Audit(ctx, tx, AuditEntry{EntityType: "governance_ruleset", EntityCode: version, Action: "activate", Actor: actor,
			Detail: map[string]any{"approval_ref": approvalRef, "approver": by.Audit(), "proposer": map[string]any{"principal": target.ProposedBy},
				"supersedes": res.Superseded, "dirtied_groups": res.DirtiedGroups,
				"carried_groups": res.CarriedGroups, "unresolved_law_codes": res.Unresolved}})
		if err != nil {
			return err
		}
		if err := CheckRulesetOwnerTx(ctx, tx, s.cfg.Principals, ""); err != nil {
			return err
		}
		if err := AnnounceTx(ctx, tx, Emit{EventType: EventRulesetActivated, SubjectTable: "governance_ruleset",
			SubjectRef: version, CollectionName: "governance_ruleset", EntityCode: version, ActorRef: actor,
			CorrelationID: "ruleset:" + version + ":activated:" + strconv.FormatInt(res.AuditID, 10),
			Payload: map[string]any{"ruleset_version": version, "status": "active", "audit_id": res.AuditID,
				"groups": res.DirtiedGroups}}); err != nil {
			return err
		}
		if !hasPrev {
			return nil
		}
		// The previous version's rows are history now (lifecycle superseded); the carried rows link the activation.
		for _, table := range []string{"governance_candidate_state", "governance_candidate_object"} {
			if _, err := tx.Exec(ctx, `UPDATE `+table+` SET lifecycle_status = 'superseded'
				WHERE ruleset_version = $1 AND lifecycle_status = 'active'`, prev.Version); err != nil {
				return fmt.Errorf("supersede the rows of %s: %w", prev.Version, err)
			}
			if err := LinkAudit(ctx, tx, table, version, res.AuditID, `audit_ref = 'carried:' || $3`, prev.Version); err != nil {
				return err
			}
		}
		return nil
	}
	// An activation rewrites every candidate row of the estate beside the scans and the intake: a deadlock or a
	// serialization failure aborts it whole, and it is tried again (at most activateAttempts times).
	for attempt := 1; ; attempt++ {
		if err = s.InTx(ctx, activate); err == nil || attempt == activateAttempts || ctx.Err() != nil || !IsPgCode(err, "40P01", "40001") {
			break
		}
	}
	if err != nil {
		return ActivationResult{Version: version}, err
	}
	// Committed: a token failing to be read is no reason to report the activation failed.
	if res.Token, err = s.ConsistencyToken(ctx); err != nil {
		s.logger.Warn("ruleset activated; its consistency token could not be read", "ruleset_version", version, "err", err)
	}
	return res, nil
}

// CurrentRuleset is the ruleset scans evaluate under: the active one, else the newest draft. A version's content
// never changes (it is its hash), so the components are decoded once per version and only the lifecycle columns
// are read each time.
func (s *Store) CurrentRuleset(ctx context.Context) (RulesetRow, error) {
	return s.currentRulesetVia(ctx, s.pool)
}

// currentRulesetVia is CurrentRuleset read through q: a caller inside a transaction reads through it, never taking
// a second connection of the pool while it holds one (with every connection held so, the pool would wait forever).
func (s *Store) currentRulesetVia(ctx context.Context, q Querier) (RulesetRow, error) {
	var head RulesetRow
	err := q.QueryRow(ctx, `SELECT ruleset_version, status, activated_at, activated_by, approval_ref, supersedes
		FROM governance_ruleset WHERE ruleset_version = (SELECT ruleset_version FROM v_current_ruleset)`).Scan(
		&head.Version, &head.Status, &head.ActivatedAt, &head.ActivatedBy, &head.ApprovalRef, &head.Supersedes)
	if err != nil {
		return RulesetRow{}, MapError(err, "current ruleset (run gcos backfill first)")
	}
	cached, err := s.RulesetVersionVia(ctx, q, head.Version)
	if err != nil {
		return RulesetRow{}, err
	}
	cached.Status, cached.ActivatedAt, cached.ActivatedBy, cached.ApprovalRef, cached.Supersedes =
		head.Status, head.ActivatedAt, head.ActivatedBy, head.ApprovalRef, head.Supersedes
	return cached, nil
}

// RulesetVersionVia returns a ruleset version with its decoded components, read through q (a transaction, or the
// gate's own pool) once per version (a version's content is its hash, so it never changes). Its lifecycle columns
// are as first read: callers that need them current read them themselves.
func (s *Store) RulesetVersionVia(ctx context.Context, q Querier, version string) (RulesetRow, error) {
	s.rulesetCache.mu.Lock()
	cached, ok := s.rulesetCache.rows[version]
	s.rulesetCache.mu.Unlock()
	if ok {
		return cached, nil
	}
	cached, err := scanRuleset(q.QueryRow(ctx, `SELECT `+rulesetColumns+` FROM governance_ruleset WHERE ruleset_version = $1`, version))
	if err != nil {
		return RulesetRow{}, MapError(err, "ruleset "+version)
	}
	s.rulesetCache.mu.Lock()
	if s.rulesetCache.rows == nil || len(s.rulesetCache.rows) > 16 {
		s.rulesetCache.rows = map[string]RulesetRow{}
	}
	s.rulesetCache.rows[version] = cached
	s.rulesetCache.mu.Unlock()
	return cached, nil
}

// rulesetCache holds decoded ruleset versions (immutable).
type rulesetCache struct {
	mu   sync.Mutex
	rows map[string]RulesetRow
}

// LatestFullSnapshotID is the snapshot of the last backfill or audit.
func LatestFullSnapshotID(ctx context.Context, q Querier) (int64, error) {
	var id int64
	err := q.QueryRow(ctx, `SELECT id FROM evolution_snapshots WHERE scope IN ('governance.backfill', 'governance.audit') ORDER BY id DESC LIMIT 1`).Scan(&id)
	return id, MapError(err, "latest full snapshot (run gcos backfill first)")
}

// GroupsByKey reads the registered groups with these keys.
func GroupsByKey(ctx context.Context, q Querier, keys []string) (map[string]gcos.Group, error) {
	rows, err := q.Query(ctx, `SELECT group_key, object_class, source_registry, axis_family, scope, lifecycle_status, owner_scope, member_count FROM governance_group WHERE group_key = ANY($1)`, keys)
	if err != nil {
		return nil, fmt.Errorf("read groups: %w", err)
	}
	out := map[string]gcos.Group{}
	for rows.Next() {
		var g gcos.Group
		if err := rows.Scan(&g.Key, &g.ObjectClass, &g.SourceRegistry, &g.AxisFamily, &g.Scope, &g.LifecycleStatus, &g.OwnerScope, &g.MemberCount); err != nil {
			rows.Close()
			return nil, err
		}
		out[g.Key] = g
	}
	return out, rows.Err()
}

// CheckRulesetOwnerTx raises ruleset_unowned for the ruleset verdicts are read under when its proposer or approver
// is not a configured principal (gcos.RulesetOwnership), and resolves it for every other ruleset. Without principals
// configured it does nothing: the check is off.
func CheckRulesetOwnerTx(ctx context.Context, tx pgx.Tx, principals []gcos.Principal, runID string) error {
	if len(principals) == 0 {
		return nil
	}
	var version, status, proposer string
	var approver *string
	err := tx.QueryRow(ctx, `SELECT r.ruleset_version, r.status, r.proposed_by, r.activated_by
		FROM v_current_ruleset c JOIN governance_ruleset r USING (ruleset_version)`).Scan(&version, &status, &proposer, &approver)
	if err == pgx.ErrNoRows {
		_, err = ResolveFindingsExceptTx(ctx, tx, gcos.IssueRulesetUnowned, []string{})
		return err
	}
	if err != nil {
		return fmt.Errorf("check ruleset owner: %w", err)
	}
	by := ""
	if approver != nil {
		by = *approver
	}
	keep := []string{}
	if ok, reasons := gcos.RulesetOwnership(proposer, by, status == "active", principals); !ok {
		keep = append(keep, gcos.CoalesceKey(gcos.IssueRulesetUnowned, version))
		if _, err := RaiseFindingTx(ctx, tx, gcos.Finding{Type: gcos.IssueRulesetUnowned, Subject: version, RunID: runID,
			RulesetVersion: version, Evidence: map[string]any{"ruleset_version": version, "status": status,
				"proposed_by": proposer, "activated_by": by, "reasons": reasons}}); err != nil {
			return err
		}
	}
	_, err = ResolveFindingsExceptTx(ctx, tx, gcos.IssueRulesetUnowned, keep)
	return err
}
