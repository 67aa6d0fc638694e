package events

import (
	"strings"
	"testing"
)

func TestResolveOwner(t *testing.T) {
	t.Parallel()
	own := []Ownership{
		{ID: 1, ScopeCode: "health", OwnerRef: "SCOPE-WIDE", Status: "active"},
		{ID: 2, ScopeCode: "health", EntityType: "invoice", OwnerRef: "CLASS-OWNER", Status: "active"},
		{ID: 3, ScopeCode: "health", EntityType: "invoice", CollectionName: "fin_invoices", OwnerRef: "EXACT", Status: "active"},
		{ID: 4, ScopeCode: "health", CollectionName: "crm_accounts", OwnerRef: "CRM-A", Status: "active"},
		{ID: 5, ScopeCode: "health", CollectionName: "crm_accounts", OwnerRef: "CRM-B", Status: "active"},
		{ID: 6, ScopeCode: "audit", EntityType: "invoice", OwnerRef: "RETIRED", Status: "revoked"},
		{ID: 7, ScopeCode: "render", CollectionName: "cms_pages", OwnerRef: "PAGES", Status: "ACTIVE"},
		{ID: 8, ScopeCode: "render", CollectionName: "cms_pages", OwnerRef: "PAGES", Status: "active"},
	}
	defaults := map[string]string{"health": "GOV-SIV", "audit": "GOV-AUDIT", "policy": "", "render": "GOV-RENDER"}
	tests := []struct {
		name       string
		q          OwnerQuery
		src        OwnerSources
		want, from string
		reason     string
		rowID      int64
	}{
		{"most specific wins", OwnerQuery{"health", "invoice", "fin_invoices"}, OwnerSources{own, defaults}, "EXACT", OwnerFromOwnership, "", 3},
		{"class row beats scope-wide row", OwnerQuery{"health", "invoice", "fin_other"}, OwnerSources{own, defaults}, "CLASS-OWNER", OwnerFromOwnership, "", 2},
		{"scope-wide row", OwnerQuery{"health", "order", "shop_orders"}, OwnerSources{own, defaults}, "SCOPE-WIDE", OwnerFromOwnership, "", 1},
		{"dispute goes to council", OwnerQuery{"health", "account", "crm_accounts"}, OwnerSources{own, defaults}, CouncilOwner, OwnerFromCouncil, "dispute", 0},
		{"same owner twice is no dispute; status is exact (ACTIVE is not active)", OwnerQuery{"render", "page", "cms_pages"}, OwnerSources{own, defaults}, "PAGES", OwnerFromOwnership, "", 8},
		{"inactive rows never own", OwnerQuery{"audit", "invoice", ""}, OwnerSources{own, defaults}, "GOV-AUDIT", OwnerFromScopeDefault, "no active ownership", 0},
		{"unknown class cannot match a class row", OwnerQuery{"audit", "", ""}, OwnerSources{own, defaults}, "GOV-AUDIT", OwnerFromScopeDefault, "", 0},
		{"empty hint falls to council", OwnerQuery{"policy", "x", "y"}, OwnerSources{own, defaults}, CouncilOwner, OwnerFromCouncil, "no default owner hint", 0},
		{"unknown scope", OwnerQuery{"nowhere", "x", "y"}, OwnerSources{own, defaults}, CouncilOwner, OwnerFromCouncil, "", 0},
		{"ownership absent degrades to the hint", OwnerQuery{"health", "invoice", "fin_invoices"}, OwnerSources{nil, defaults}, "GOV-SIV", OwnerFromScopeDefault, "ownership registry absent", 0},
		{"both absent: council, never a guess", OwnerQuery{"health", "invoice", "fin_invoices"}, OwnerSources{}, CouncilOwner, OwnerFromCouncil, "responsibility scope registry absent", 0},
		{"empty scope with one owner", OwnerQuery{"", "invoice", "fin_invoices"}, OwnerSources{own, nil}, "EXACT", OwnerFromOwnership, "", 3},
		{"empty scope, defaults disagree", OwnerQuery{"", "nothing", "nowhere"}, OwnerSources{[]Ownership{}, defaults}, CouncilOwner, OwnerFromCouncil, "disagree", 0},
		{"empty registries", OwnerQuery{"health", "x", "y"}, OwnerSources{[]Ownership{}, map[string]string{}}, CouncilOwner, OwnerFromCouncil, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ResolveOwner(tc.q, tc.src)
			if got.OwnerRef != tc.want || got.Source != tc.from || got.RowID != tc.rowID {
				t.Fatalf("ResolveOwner = %+v; want owner %s from %s row %d", got, tc.want, tc.from, tc.rowID)
			}
			if got.Reason == "" || !strings.Contains(got.Reason, tc.reason) {
				t.Fatalf("reason %q, want one mentioning %q", got.Reason, tc.reason)
			}
		})
	}
}
