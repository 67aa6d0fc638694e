package gcos_test

import (
	"slices"
	"testing"

	"gcos"
)

func TestResolveOwnership(t *testing.T) {
	t.Parallel()
	s := gcos.Str
	rows := []gcos.OwnershipRow{
		{ID: 1, ScopeCode: "health", OwnerRef: "SCOPE-WIDE", Status: "active"},
		{ID: 2, ScopeCode: "health", EntityType: s("invoice"), OwnerRef: "CLASS-OWNER", Status: "active"},
		{ID: 3, ScopeCode: "health", EntityType: s("invoice"), CollectionName: s("fin_invoices"), OwnerRef: "EXACT", Status: "active"},
		{ID: 4, ScopeCode: "health", CollectionName: s("crm_accounts"), OwnerRef: "CRM-A", Status: "active"},
		{ID: 5, ScopeCode: "health", CollectionName: s("crm_accounts"), OwnerRef: "CRM-B", Status: "active"},
		{ID: 6, ScopeCode: "audit", EntityType: s("invoice"), OwnerRef: "RETIRED", Status: "inactive"},
		{ID: 7, ScopeCode: "render", CollectionName: s("cms_pages"), OwnerRef: "PAGES", Status: "active"},
		{ID: 8, ScopeCode: "render", CollectionName: s("cms_pages"), OwnerRef: "PAGES", Status: "active"},
		{ID: 9, ScopeCode: "render", EntityType: s("page"), OwnerRef: "PAGE-CLASS", Status: "active"},
		{ID: 10, ScopeCode: "audit", CollectionName: s("fin_invoices"), OwnerRef: " ", Status: "active"},
		{ID: 11, ScopeCode: "policy", CollectionName: s("fin_invoices"), OwnerRef: "FIN", Status: "ACTIVE"},
	}
	tests := []struct {
		name                     string
		scope, class, collection string
		owner                    string // "" for none
		row                      int64
		claimants                []string
	}{
		{"class and collection beat class alone", "health", "invoice", "fin_invoices", "EXACT", 3, nil},
		{"class beats scope-wide", "health", "invoice", "fin_other", "CLASS-OWNER", 2, nil},
		{"scope-wide when nothing else matches", "health", "order", "shop_orders", "SCOPE-WIDE", 1, nil},
		{"two collection rows naming different owners: dispute", "health", "account", "crm_accounts", "", 0, []string{"CRM-A", "CRM-B"}},
		{"two rows naming one owner: no dispute, the lowest id", "render", "banner", "cms_pages", "PAGES", 7, nil},
		{"a class row beats collection rows", "render", "page", "cms_pages", "PAGE-CLASS", 9, nil},
		{"inactive rows never own", "audit", "invoice", "fin_other", "", 0, nil},
		{"a blank owner never owns", "audit", "invoice", "fin_invoices", "", 0, nil},
		{"status is exact: ACTIVE is not active", "policy", "invoice", "fin_invoices", "", 0, nil},
		{"another scope's rows never own", "nowhere", "invoice", "fin_invoices", "", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := gcos.ResolveOwnership(rows, tt.scope, tt.class, tt.collection)
			if tt.owner == "" && got.Owner != nil || tt.owner != "" && (got.Owner == nil || *got.Owner != tt.owner) {
				t.Fatalf("owner = %v, want %q", got.Owner, tt.owner)
			}
			if got.RowID != tt.row || got.Disputed != (tt.claimants != nil) || !slices.Equal(got.Claimants, tt.claimants) {
				t.Fatalf("got %+v, want row %d, claimants %v", got, tt.row, tt.claimants)
			}
		})
	}
	if got := gcos.ResolveOwnership(nil, "health", "invoice", "fin_invoices"); got.Owner != nil || got.Disputed {
		t.Fatalf("no rows: %+v, want no owner", got)
	}
}
