package gcos_test

import (
	"testing"

	"gcos"
)

func TestMayAct(t *testing.T) {
	t.Parallel()
	ps := []gcos.Principal{
		{Name: "ops", Roles: []string{gcos.RoleReader, gcos.RoleOperator}},
		{Name: "appr", Roles: []string{gcos.RoleApprover}},
		{Name: "nobody"},
	}
	for _, tc := range []struct {
		principals []gcos.Principal
		who, role  string
		want       string // "" allowed, else the error code
	}{
		{nil, "anyone", gcos.RoleApprover, ""}, // no principals configured: names are not checked
		{ps, "ops", gcos.RoleOperator, ""},
		{ps, "ops", gcos.RoleReader, ""},
		{ps, "ops", gcos.RoleApprover, gcos.EFORBIDDEN},
		{ps, "appr", gcos.RoleApprover, ""},
		{ps, "appr", gcos.RoleReader, ""}, // any role reads
		{ps, "appr", gcos.RoleOperator, gcos.EFORBIDDEN},
		{ps, "nobody", gcos.RoleReader, gcos.EFORBIDDEN},
		{ps, "mallory", gcos.RoleReader, gcos.EFORBIDDEN},
	} {
		if got := gcos.ErrorCode(gcos.MayAct(tc.principals, tc.who, tc.role)); got != tc.want {
			t.Errorf("MayAct(%d principals, %s, %s) = %q, want %q", len(tc.principals), tc.who, tc.role, got, tc.want)
		}
	}
}

func TestSelfApproval(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name               string
		proposer, approver gcos.Actor
		refused            bool
	}{
		{"two principals", gcos.Actor{Principal: "dana", Name: "dana"}, gcos.Actor{Principal: "erin", Name: "erin"}, false},
		{"one principal, two names", gcos.Actor{Principal: "dana", Name: "alice"}, gcos.Actor{Principal: "dana", Name: "bob"}, true},
		{"another principal naming the proposer", gcos.Actor{Principal: "dana", Name: "dana"}, gcos.Actor{Principal: "erin", Name: "dana"}, true},
		{"one token's identity", gcos.Actor{Principal: "token:1a2b3c4d"}, gcos.Actor{Principal: "token:1a2b3c4d", Name: "x"}, true},
	} {
		if got := gcos.SelfApproval(tc.proposer, tc.approver) != ""; got != tc.refused {
			t.Errorf("%s: refused %v, want %v", tc.name, got, tc.refused)
		}
	}
}

func TestFindingExplain(t *testing.T) {
	t.Parallel()
	const key = "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		coalesceKey   string
		evidence      map[string]any
		group, object string
	}{
		{"gov:candidate:stale:" + key, nil, key, ""},
		{"gov:coverage:orphan:x", map[string]any{"group_key": key}, key, ""},
		{"gov:input:duplicate:birth_registry:42", map[string]any{"object": "invoices:INV-1"}, "", "invoices:INV-1"},
		{"gov:handoff:lag:birth_registry", map[string]any{"object": "nocolon"}, "", ""},
		{"gov:candidate:stale:0123456789ABCDEF0123456789ABCDEF", nil, "", ""}, // not a group key's form
		{"gov:ruleset:drift:gov-rs-0123456789ab", map[string]any{}, "", ""},
	} {
		g, o := gcos.FindingExplain(tc.coalesceKey, tc.evidence)
		if g != tc.group || o != tc.object {
			t.Errorf("FindingExplain(%s, %v) = %q, %q; want %q, %q", tc.coalesceKey, tc.evidence, g, o, tc.group, tc.object)
		}
	}
}
