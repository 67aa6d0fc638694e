package oracle_test

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gcos"
	"gcos/gate"
	"gcos/postgres"
	"gcos/preview"
	"gcos/world"
)

// Preview equals the effect: for every kind of proposed change, the test previews it on a settled world, then
// makes the change as an operator would (the registry row and its changelog row), lets GCOS settle, and compares
// the gate's decision on every object and the invariant ledger of every scope with the preview, exactly.

// decisions is the gate's write decision on every object of the world, by reference.
func (e *env) decisions(t *testing.T) map[string]string {
	t.Helper()
	objects, err := e.strings(`SELECT collection_name || ':' || entity_code FROM birth_registry ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for chunk := range slices.Chunk(objects, e.store.Config().Gate.BatchMax) {
		checks := make([]gcos.GateCheck, len(chunk))
		for i, o := range chunk {
			checks[i] = gcos.GateCheck{Object: o, Action: gcos.ActionWrite}
		}
		res := e.gate.DecideBatch(e.ctx, checks, gate.GateOptions{Consistency: gate.ConsistencyFull})
		for i, r := range res.Results {
			out[chunk[i]] = r.Decision
		}
	}
	return out
}

func (e *env) ledgers(t *testing.T) map[string]gcos.Ledger {
	t.Helper()
	rep, err := postgres.ReadLedgers(e.ctx, e.pool, "")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]gcos.Ledger{}
	for _, l := range rep.Ledgers {
		out[l.Scope] = l
	}
	return out
}

// previewCase proposes sets of changes on the world as it is; the test previews them in turn and makes the first
// that flips in the case's direction (any set when flips is ""), one change at a time, as an operator would.
type previewCase struct {
	name    string
	propose func(e *env) ([][]gcos.ProposedChange, error)
	flips   string // "allow_to_block", "block_to_allow" or ""
}

func int64p(v int64) *int64 { return &v }

// orphans lists the classes and collections of high-risk relevant orphan groups, each with the scopes it is an
// orphan in, in a fixed order.
func (e *env) orphans() ([][3]string, map[[2]string][]string, error) {
	rows, err := e.strings(`SELECT object_class || '|' || source_registry || '|' || scope FROM v_candidate_effective
		WHERE coverage_outcome = 'orphan' AND risk_class <> 'read_descriptive' AND lifecycle_status = 'active'
		ORDER BY object_class, source_registry, scope`)
	if err != nil {
		return nil, nil, err
	}
	var order [][3]string
	scopes := map[[2]string][]string{}
	for _, r := range rows {
		p := strings.SplitN(r, "|", 3)
		k := [2]string{p[0], p[1]}
		if scopes[k] == nil {
			order = append(order, [3]string{p[0], p[1], p[2]})
		}
		scopes[k] = append(scopes[k], p[2])
	}
	return order, scopes, nil
}

// firstObject is the first active anchor of a class in a collection.
func (e *env) firstObject(class, coll string) (string, error) {
	codes, err := e.strings(`SELECT entity_code FROM birth_registry WHERE entity_type = $1 AND collection_name = $2
		AND status = 'active' AND parent_code IS NULL ORDER BY id LIMIT 1`, class, coll)
	if err != nil || len(codes) == 0 {
		return "", fmt.Errorf("no object of %s in %s (%v)", class, coll, err)
	}
	return codes[0], nil
}

// perOrphan builds one candidate set per orphaned class and collection.
func perOrphan(e *env, build func(class, coll string, scopes []string) ([]gcos.ProposedChange, error)) ([][]gcos.ProposedChange, error) {
	order, scopes, err := e.orphans()
	if err != nil {
		return nil, err
	}
	var out [][]gcos.ProposedChange
	for _, o := range order {
		set, err := build(o[0], o[1], scopes[[2]string{o[0], o[1]}])
		if err != nil {
			return nil, err
		}
		out = append(out, set)
	}
	return out, nil
}

func ownerAssign(class, scope string) gcos.ProposedChange {
	return gcos.ProposedChange{Kind: gcos.PreviewOwnerAssign, Scope: gcos.Str(scope), EntityType: gcos.Str(class), OwnerRef: gcos.Str("team-preview")}
}

func groupException(id, class, coll, scope string) gcos.ProposedChange {
	exp := time.Now().Add(24 * time.Hour).UTC().Truncate(time.Second)
	return gcos.ProposedChange{Kind: gcos.PreviewExceptionGrant, ExceptionID: gcos.Str(id), Scope: gcos.Str(scope),
		EntityType: gcos.Str(class), Collection: gcos.Str(coll), ApprovalRef: gcos.Str("APR-P"), ExpiresAt: &exp}
}

var previewCases = []previewCase{
	{"owner_revoke", func(e *env) ([][]gcos.ProposedChange, error) {
		ids, err := e.strings(`SELECT id::text FROM governance_object_ownership WHERE status = 'active' ORDER BY id`)
		var out [][]gcos.ProposedChange
		for _, id := range ids {
			n, _ := strconv.ParseInt(id, 10, 64)
			out = append(out, []gcos.ProposedChange{{Kind: gcos.PreviewOwnerRevoke, OwnershipID: int64p(n)}})
		}
		return out, err
	}, "allow_to_block"},
	{"owner_assign", func(e *env) ([][]gcos.ProposedChange, error) {
		return perOrphan(e, func(class, coll string, scopes []string) ([]gcos.ProposedChange, error) {
			var set []gcos.ProposedChange
			for _, s := range scopes {
				set = append(set, ownerAssign(class, s))
			}
			return set, nil
		})
	}, "block_to_allow"},
	{"owner_move", func(e *env) ([][]gcos.ProposedChange, error) {
		ids, err := e.strings(`SELECT id::text FROM governance_object_ownership WHERE status = 'active' ORDER BY id LIMIT 3`)
		var out [][]gcos.ProposedChange
		for _, id := range ids {
			n, _ := strconv.ParseInt(id, 10, 64)
			out = append(out, []gcos.ProposedChange{{Kind: gcos.PreviewOwnerMove, OwnershipID: int64p(n), OwnerRef: gcos.Str("team-moved-preview")}})
		}
		return out, err
	}, ""},
	{"exception_grant_group", func(e *env) ([][]gcos.ProposedChange, error) {
		return perOrphan(e, func(class, coll string, scopes []string) ([]gcos.ProposedChange, error) {
			var set []gcos.ProposedChange
			for i, s := range scopes {
				set = append(set, groupException(fmt.Sprintf("EXC-PREVIEW-G%d", i), class, coll, s))
			}
			return set, nil
		})
	}, "block_to_allow"},
	{"exception_grant_object", func(e *env) ([][]gcos.ProposedChange, error) {
		// One object excepted in its first orphan scope, its class owned in the others: exactly it is allowed.
		return perOrphan(e, func(class, coll string, scopes []string) ([]gcos.ProposedChange, error) {
			code, err := e.firstObject(class, coll)
			set := []gcos.ProposedChange{{Kind: gcos.PreviewExceptionGrant, ExceptionID: gcos.Str("EXC-PREVIEW-O"), Scope: gcos.Str(scopes[0]),
				EntityType: gcos.Str(class), Collection: gcos.Str(coll), EntityCode: gcos.Str(code), ApprovalRef: gcos.Str("APR-P")}}
			for _, s := range scopes[1:] {
				set = append(set, ownerAssign(class, s))
			}
			return set, err
		})
	}, "block_to_allow"},
	{"exception_revoke", func(e *env) ([][]gcos.ProposedChange, error) {
		ids, err := e.heldExceptions()
		return [][]gcos.ProposedChange{{{Kind: gcos.PreviewExceptionRevoke, ExceptionID: gcos.Str(ids[0])}}}, err
	}, "allow_to_block"},
	{"exception_change", func(e *env) ([][]gcos.ProposedChange, error) {
		ids, err := e.heldExceptions()
		past := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
		return [][]gcos.ProposedChange{{{Kind: gcos.PreviewExceptionChange, ExceptionID: gcos.Str(ids[len(ids)-1]), ExpiresAt: &past}}}, err
	}, "allow_to_block"},
	{"object_retire", lifecycleCandidates(gcos.PreviewObjectRetire, false), "block_to_allow"},
	{"object_supersede_with_children", lifecycleCandidates(gcos.PreviewObjectSupersede, true), ""},
	{"object_merge", lifecycleCandidates(gcos.PreviewObjectMerge, false), "block_to_allow"},
	{"coverage_profile", func(e *env) ([][]gcos.ProposedChange, error) {
		// An orphaned class becomes low risk: its orphans no longer block a write.
		return perOrphan(e, func(class, _ string, _ []string) ([]gcos.ProposedChange, error) {
			return []gcos.ProposedChange{{Kind: gcos.PreviewCoverageProfile, EntityType: gcos.Str(class), RiskClass: gcos.Str("read_descriptive")}}, nil
		})
	}, "block_to_allow"},
	{"ruleset_activate", func(e *env) ([][]gcos.ProposedChange, error) {
		// A draft in which an orphaned class no longer requires coverage, computed from the registry.
		order, _, err := e.orphans()
		if err != nil || len(order) == 0 {
			return nil, fmt.Errorf("no orphan (%v)", err)
		}
		if err := e.exec(`UPDATE governance_coverage_profile SET coverage_required = false WHERE entity_type = $1`, order[0][0]); err != nil {
			return nil, err
		}
		rs, _, err := e.store.ComputeRuleset(e.ctx, "proposer")
		return [][]gcos.ProposedChange{{{Kind: gcos.PreviewRulesetActivate, RulesetVersion: gcos.Str(rs.Version)}}}, err
	}, "block_to_allow"},
	{"coverage_status", func(e *env) ([][]gcos.ProposedChange, error) {
		// The collection of an orphaned class becomes exempt: its groups retire from coverage.
		return perOrphan(e, func(_, coll string, _ []string) ([]gcos.ProposedChange, error) {
			return []gcos.ProposedChange{{Kind: gcos.PreviewCoverageStatus, Collection: gcos.Str(coll), CoverageStatus: gcos.Str("BIRTH_EXEMPT_SYSTEM")}}, nil
		})
	}, "block_to_allow"},
}

// lifecycleCandidates proposes a lifecycle change of the first object of each orphaned class (blocked now), or of
// anchors with inherited children (which move with them).
func lifecycleCandidates(kind gcos.PreviewKind, withChildren bool) func(e *env) ([][]gcos.ProposedChange, error) {
	return func(e *env) ([][]gcos.ProposedChange, error) {
		if withChildren {
			if _, err := world.AddChildren(e.ctx, e.pool, 4, 11); err != nil {
				return nil, err
			}
			if err := e.settle(); err != nil {
				return nil, err
			}
			refs, err := e.strings(`SELECT DISTINCT a.collection_name || '|' || a.entity_code FROM birth_registry a
				JOIN birth_registry c ON c.collection_name = a.collection_name AND c.parent_code = a.entity_code
				WHERE a.status = 'active' AND a.parent_code IS NULL ORDER BY 1 LIMIT 5`)
			if err != nil || len(refs) == 0 {
				return nil, fmt.Errorf("no anchor with children (%v)", err)
			}
			var out [][]gcos.ProposedChange
			for _, r := range refs {
				coll, code, _ := strings.Cut(r, "|")
				out = append(out, []gcos.ProposedChange{{Kind: kind, Collection: gcos.Str(coll), EntityCode: gcos.Str(code)}})
			}
			return out, nil
		}
		return perOrphan(e, func(class, coll string, _ []string) ([]gcos.ProposedChange, error) {
			code, err := e.firstObject(class, coll)
			return []gcos.ProposedChange{{Kind: kind, Collection: gcos.Str(coll), EntityCode: gcos.Str(code)}}, err
		})
	}
}

// heldExceptions grants approved group exceptions covering an orphaned class in every scope it is an orphan in,
// and settles, so the class's objects are allowed only while each of them holds.
func (e *env) heldExceptions() ([]string, error) {
	order, scopes, err := e.orphans()
	if err != nil || len(order) == 0 {
		return nil, fmt.Errorf("no orphan (%v)", err)
	}
	class, coll := order[0][0], order[0][1]
	var ids []string
	for i, s := range scopes[[2]string{class, coll}] {
		id := fmt.Sprintf("EXC-HELD-%d", i)
		if err := e.exec(`INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, approval_ref, expires_at)
			VALUES ($1, $2, $3, $4, 'APR-H', now() + interval '1 day')`, id, s, class, coll); err != nil {
			return nil, err
		}
		if err := e.changelog("exception", id, "create", "registry-sync"); err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, e.settle()
}

// applyChange makes one proposed change as an operator would: the registry row and its changelog row.
func (e *env) applyChange(c gcos.ProposedChange) error {
	switch c.Kind {
	case gcos.PreviewOwnerRevoke:
		if err := e.exec(`UPDATE governance_object_ownership SET status = 'revoked' WHERE id = $1`, *c.OwnershipID); err != nil {
			return err
		}
		return e.changelog("ownership", fmt.Sprint(*c.OwnershipID), "update", "registry-sync")
	case gcos.PreviewOwnerMove:
		if err := e.exec(`UPDATE governance_object_ownership SET owner_ref = $2 WHERE id = $1`, *c.OwnershipID, *c.OwnerRef); err != nil {
			return err
		}
		return e.changelog("ownership", fmt.Sprint(*c.OwnershipID), "update", "registry-sync")
	case gcos.PreviewOwnerAssign:
		var id string
		if err := e.pool.QueryRow(e.ctx, `INSERT INTO governance_object_ownership (scope_code, entity_type, collection_name, owner_ref)
			VALUES ($1, $2, $3, $4) RETURNING id::text`, *c.Scope, c.EntityType, c.Collection, *c.OwnerRef).Scan(&id); err != nil {
			return err
		}
		return e.changelog("ownership", id, "create", "registry-sync")
	case gcos.PreviewExceptionGrant:
		var fp *string
		if c.EntityCode != nil {
			f, err := e.fingerprint(*c.Collection, *c.EntityCode)
			if err != nil {
				return err
			}
			fp = &f
		}
		if err := e.exec(`INSERT INTO governance_exception (exception_id, scope_code, entity_type, collection_name, entity_code,
			approval_ref, expires_at, fingerprint) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
			*c.ExceptionID, c.Scope, c.EntityType, c.Collection, c.EntityCode, *c.ApprovalRef, c.ExpiresAt, fp); err != nil {
			return err
		}
		return e.changelog("exception", *c.ExceptionID, "create", "registry-sync")
	case gcos.PreviewExceptionRevoke:
		if err := e.exec(`UPDATE governance_exception SET status = 'revoked' WHERE exception_id = $1`, *c.ExceptionID); err != nil {
			return err
		}
		return e.changelog("exception", *c.ExceptionID, "update", "registry-risk-desk")
	case gcos.PreviewExceptionChange:
		if err := e.exec(`UPDATE governance_exception SET expires_at = $2 WHERE exception_id = $1`, *c.ExceptionID, *c.ExpiresAt); err != nil {
			return err
		}
		return e.changelog("exception", *c.ExceptionID, "update", "registry-risk-desk")
	case gcos.PreviewObjectRetire, gcos.PreviewObjectSupersede, gcos.PreviewObjectMerge:
		var class string
		if err := e.pool.QueryRow(e.ctx, `UPDATE birth_registry SET status = $3 WHERE collection_name = $1 AND entity_code = $2
			RETURNING entity_type`, *c.Collection, *c.EntityCode, gcos.PreviewLifecycleStatus[c.Kind]).Scan(&class); err != nil {
			return err
		}
		action := map[gcos.PreviewKind]string{gcos.PreviewObjectRetire: "retire", gcos.PreviewObjectSupersede: "supersede",
			gcos.PreviewObjectMerge: "merge"}[c.Kind]
		return e.changelog(class, *c.EntityCode, action, "registry-sync")
	case gcos.PreviewCoverageProfile:
		if err := e.exec(`UPDATE governance_coverage_profile SET risk_class = coalesce($2, risk_class),
			coverage_required = coalesce($3, coverage_required), privacy = coalesce($4, privacy) WHERE entity_type = $1`,
			*c.EntityType, c.RiskClass, c.Required, c.Privacy); err != nil {
			return err
		}
		_, err := e.activate() // a profile is in force once a ruleset carrying it is active
		return err
	case gcos.PreviewRulesetActivate:
		_, err := e.store.ActivateRuleset(e.ctx, *c.RulesetVersion, "APR-R", "approver")
		return err
	case gcos.PreviewCoverageStatus:
		if err := e.exec(`UPDATE collection_registry SET coverage_status = $2 WHERE collection_name = $1`, *c.Collection, *c.CoverageStatus); err != nil {
			return err
		}
		return e.changelog("collection", *c.Collection, "update", "registry-sync")
	}
	return fmt.Errorf("the test cannot make a %s change", c.Kind)
}

func TestPreviewEqualsEffect(t *testing.T) {
	built := builtWorld(t)
	for _, pc := range previewCases {
		t.Run(pc.name, func(t *testing.T) {
			e := newEnv(t, built)
			sets, err := pc.propose(e)
			if err != nil {
				t.Fatalf("propose: %v", err)
			}
			beforeDecisions, beforeLedgers := e.decisions(t), e.ledgers(t)
			var rep gcos.PreviewReport
			for _, set := range sets {
				if rep, err = preview.New(e.store).Preview(e.ctx, gcos.PreviewRequest{Changes: set, Sample: gcos.PreviewSampleMax}); err != nil {
					t.Fatalf("preview %+v: %v", set, err)
				}
				if pc.flips == "" || (pc.flips == "allow_to_block" && rep.Flips.AllowToBlock > 0) ||
					(pc.flips == "block_to_allow" && rep.Flips.BlockToAllow > 0) {
					break
				}
			}
			t.Logf("%s (%d changes): %d groups judged, %d changed, flips %d allow→block, %d block→allow", pc.name, len(rep.Changes), rep.AffectedGroups,
				rep.ChangedGroups, rep.Flips.AllowToBlock, rep.Flips.BlockToAllow)
			for _, c := range rep.Changes {
				if err := e.applyChange(c); err != nil {
					t.Fatalf("apply %s: %v", c.Kind, err)
				}
			}
			if err := e.settle(); err != nil {
				t.Fatal(err)
			}
			afterDecisions, afterLedgers := e.decisions(t), e.ledgers(t)
			var toBlock, toAllow []string
			for _, o := range slices.Sorted(maps.Keys(afterDecisions)) {
				switch b, a := beforeDecisions[o], afterDecisions[o]; {
				case b == gcos.GateAllow && a == gcos.GateBlock:
					toBlock = append(toBlock, o)
				case b == gcos.GateBlock && a == gcos.GateAllow:
					toAllow = append(toAllow, o)
				}
			}
			if int64(len(toBlock)) != rep.Flips.AllowToBlock || int64(len(toAllow)) != rep.Flips.BlockToAllow {
				t.Errorf("flips: previewed %d allow→block, %d block→allow; the change flipped %d (%v), %d (%v)",
					rep.Flips.AllowToBlock, rep.Flips.BlockToAllow, len(toBlock), firstFew(toBlock), len(toAllow), firstFew(toAllow))
			}
			if want := min(int64(gcos.PreviewSampleMax), rep.Flips.AllowToBlock); int64(len(rep.Flips.FirstBlocked)) != want {
				t.Errorf("preview names %d allow→block objects of %d, want %d", len(rep.Flips.FirstBlocked), rep.Flips.AllowToBlock, want)
			}
			if want := min(int64(gcos.PreviewSampleMax), rep.Flips.BlockToAllow); int64(len(rep.Flips.FirstAllowed)) != want {
				t.Errorf("preview names %d block→allow objects of %d, want %d", len(rep.Flips.FirstAllowed), rep.Flips.BlockToAllow, want)
			}
			for _, f := range rep.Flips.FirstBlocked {
				if !slices.Contains(toBlock, f.Object) {
					t.Errorf("preview names %s as allow→block; the change did not flip it", f.Object)
				}
			}
			for _, f := range rep.Flips.FirstAllowed {
				if !slices.Contains(toAllow, f.Object) {
					t.Errorf("preview names %s as block→allow; the change did not flip it", f.Object)
				}
			}
			switch pc.flips {
			case "allow_to_block":
				if rep.Flips.AllowToBlock == 0 {
					t.Errorf("the chosen %s flips nothing allow→block: the case proves nothing", pc.name)
				}
			case "block_to_allow":
				if rep.Flips.BlockToAllow == 0 {
					t.Errorf("the chosen %s flips nothing block→allow: the case proves nothing", pc.name)
				}
			}
			previewed := map[string]gcos.PreviewLedger{}
			for _, l := range rep.Ledgers {
				previewed[l.Scope] = l
				if l.Before != beforeLedgers[l.Scope] {
					t.Errorf("scope %s: preview's ledger before %+v, stored %+v", l.Scope, l.Before, beforeLedgers[l.Scope])
				}
			}
			for scope, after := range afterLedgers {
				want := beforeLedgers[scope]
				if l, ok := previewed[scope]; ok {
					want = l.After
				}
				if after != want {
					t.Errorf("scope %s: ledger after the change %+v, previewed %+v", scope, after, want)
				}
			}
		})
	}
}

func firstFew(xs []string) []string { return xs[:min(len(xs), 5)] }
