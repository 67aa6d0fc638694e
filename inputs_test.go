package gcos_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"gcos"
)

// TestGroupInputs: a group's input fingerprint per registry moves exactly when a row that feeds its verdict moves.
func TestGroupInputs(t *testing.T) {
	s := gcos.Str
	base := func() gcos.Registries {
		r := gcos.Registries{
			Collections: map[string]gcos.CollectionRow{
				"orders":  {CollectionName: "orders", CoverageStatus: s("BIRTH_REQUIRED"), ScopeClass: s("IN_SCOPE")},
				"tickets": {CollectionName: "tickets", CoverageStatus: s("BIRTH_REQUIRED"), ScopeClass: s("IN_SCOPE")},
			},
			Classes: map[string]*string{"order": s("orders"), "ticket": s("tickets")},
			Ownership: []gcos.OwnershipRow{
				{ID: 1, ScopeCode: "health", EntityType: s("order"), OwnerRef: "team-a", Status: "active"},
				{ID: 2, ScopeCode: "health", CollectionName: s("tickets"), OwnerRef: "team-b", Status: "active"},
			},
			Exceptions: []gcos.ExceptionRow{
				{ExceptionID: "EXC-1", ScopeCode: s("health"), EntityType: s("order"), Status: "approved", ApprovalRef: s("APR")},
			},
		}
		r.Finish()
		return r
	}
	group := gcos.Dimensions{ObjectClass: s("order"), SourceRegistry: s("orders"), Scope: s("health"), LifecycleStatus: s("active")}
	other := gcos.Dimensions{ObjectClass: s("ticket"), SourceRegistry: s("tickets"), Scope: s("health"), LifecycleStatus: s("active")}
	expires := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name        string
		change      func(*gcos.Registries)
		group, rest []string // drifted registries of group and of other
	}{
		{"nothing", func(*gcos.Registries) {}, nil, nil},
		{"coverage of the group's collection", func(r *gcos.Registries) {
			c := r.Collections["orders"]
			c.CoverageStatus = s("BIRTH_EXEMPT_SYSTEM")
			r.Collections["orders"] = c
		}, []string{gcos.InputCollections}, nil},
		{"the group's collection removed", func(r *gcos.Registries) { delete(r.Collections, "orders") }, []string{gcos.InputCollections}, nil},
		{"the class's catalog row", func(r *gcos.Registries) { r.Classes["order"] = s("elsewhere") }, []string{gcos.InputClasses}, nil},
		{"the owner of the class", func(r *gcos.Registries) { r.Ownership[0].OwnerRef = "team-z" }, []string{gcos.InputOwnership}, nil},
		{"a new owner row for the other collection", func(r *gcos.Registries) {
			r.Ownership = append(r.Ownership, gcos.OwnershipRow{ID: 3, ScopeCode: "health", CollectionName: s("tickets"), OwnerRef: "team-c", Status: "active"})
		}, nil, []string{gcos.InputOwnership}},
		{"an owner row in another scope", func(r *gcos.Registries) {
			r.Ownership = append(r.Ownership, gcos.OwnershipRow{ID: 4, ScopeCode: "audit", EntityType: s("order"), OwnerRef: "team-d", Status: "active"})
		}, nil, nil},
		{"the exception's expiry", func(r *gcos.Registries) { r.Exceptions[0].ExpiresAt = &expires }, []string{gcos.InputExceptions}, nil},
		{"an exception revoked", func(r *gcos.Registries) { r.Exceptions[0].Status = "revoked" }, []string{gcos.InputExceptions}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := base()
			after := base()
			tt.change(&after)
			if got := gcos.DriftedInputs(before.GroupInputs(group), after.GroupInputs(group)); !slices.Equal(got, tt.group) {
				t.Errorf("group drifted in %v, want %v", got, tt.group)
			}
			if got := gcos.DriftedInputs(before.GroupInputs(other), after.GroupInputs(other)); !slices.Equal(got, tt.rest) {
				t.Errorf("other group drifted in %v, want %v", got, tt.rest)
			}
		})
	}
	// A capture that did not record a registry compares nothing for it.
	if got := gcos.DriftedInputs(map[string]string{}, base().GroupInputs(group)); len(got) != 0 {
		t.Errorf("against an empty record: %v", got)
	}
}

// TestDegradations: each absent optional registry that feeds the verdicts says what degrades without it, in the
// order given; one that feeds none is not listed.
func TestDegradations(t *testing.T) {
	t.Parallel()
	got := gcos.Degradations([]string{gcos.TableCoverageProfile, "law_catalog", gcos.TableScopes})
	if len(got) != 2 || !strings.HasPrefix(got[0], gcos.TableCoverageProfile+": risk is unknown and treated as high") ||
		!strings.HasSuffix(got[1], "implicit scope "+gcos.UnscopedScope) {
		t.Errorf("Degradations = %q", got)
	}
	for _, table := range []string{gcos.TableScopes, gcos.TableOwnership, gcos.TableCoverageProfile, gcos.TablePivots, gcos.TableJurisdiction, gcos.TableExceptions} {
		if len(gcos.Degradations([]string{table})) != 1 {
			t.Errorf("%s: no degradation said", table)
		}
	}
	if gcos.Degradations(nil) != nil {
		t.Error("nothing absent, yet a degradation")
	}
}
