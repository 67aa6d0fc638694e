package oracle_test

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"

	"gcos"
	"gcos/oracle"
	"gcos/postgres"
	"gcos/postgres/pgtest"
)

// TestReadWalksParentChainsAsFoldDoes: the database's walk up parent chains (oracle.Read counts every base's members
// with it and gives every birth read one by one its anchor) finds what the obvious walk in Go finds, on chains that
// end every way a chain can: at a root, deep down, at a parent that was never born, at a birth that is its own
// parent, in a cycle, and at a code that is born only in another collection.
func TestReadWalksParentChainsAsFoldDoes(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.NewDB(t)
	store := postgres.New(pool, gcos.DefaultConfig(), nil)
	str := gcos.Str
	births := []oracle.Birth{
		{Code: "r1", Collection: "c1", Class: "order", Status: "active"},
		{Code: "r2", Collection: "c1", Class: "order", Status: "retired"},
		{Code: "k1", Collection: "c1", Class: "line", Status: "draft", Parent: str("r1")},
		{Code: "k2", Collection: "c1", Class: "line", Status: "active", Parent: str("k1")},
		{Code: "k3", Collection: "c1", Class: "note", Status: "active", Parent: str("k2")}, // three steps to r1
		{Code: "lost", Collection: "c1", Class: "line", Status: "active", Parent: str("never")},
		{Code: "under-lost", Collection: "c1", Class: "note", Status: "draft", Parent: str("lost")},
		{Code: "self", Collection: "c1", Class: "line", Status: "active", Parent: str("self")},
		{Code: "a", Collection: "c1", Class: "line", Status: "active", Parent: str("b")}, // a two-cycle
		{Code: "b", Collection: "c1", Class: "order", Status: "retired", Parent: str("a")},
		{Code: "x", Collection: "c1", Class: "line", Status: "active", Parent: str("y")}, // a three-cycle
		{Code: "y", Collection: "c1", Class: "note", Status: "draft", Parent: str("z")},
		{Code: "z", Collection: "c1", Class: "order", Status: "active", Parent: str("x")},
		{Code: "elsewhere", Collection: "c2", Class: "line", Status: "active", Parent: str("r1")}, // r1 is born in c1 only
		{Code: "r1", Collection: "c2", Class: "order", Status: "draft"},
		{Code: "r1-kid", Collection: "c2", Class: "line", Status: "active", Parent: str("r1")},
	}
	for i := range births {
		b := &births[i]
		if err := pool.QueryRow(ctx, `INSERT INTO birth_registry (entity_code, collection_name, entity_type, status, parent_code)
			VALUES ($1, $2, $3, $4, $5) RETURNING id`, b.Code, b.Collection, b.Class, b.Status, b.Parent).Scan(&b.ID); err != nil {
			t.Fatal(err)
		}
	}
	var refs []string
	for _, b := range births {
		refs = append(refs, b.Ref())
	}
	read := func(opts oracle.ReadOptions) oracle.Substrate {
		t.Helper()
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = tx.Rollback(ctx) }()
		sub, err := oracle.Read(ctx, tx, gcos.DefaultConfig().SourceBinding, store.BirthBinding().ObjectFingerprintSQL(), opts)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	wantBases, wantBirths := fold(births)
	sub := read(oracle.ReadOptions{Also: refs})
	if got := sortedBases(sub.Bases); !slices.Equal(got, wantBases) {
		t.Errorf("bases:\n got %v\nwant %v", got, wantBases)
	}
	if !slices.EqualFunc(sub.Births, wantBirths, sameBirth) {
		t.Errorf("births:\n got %+v\nwant %+v", sub.Births, wantBirths)
	}

	// Limited to c2: only its bases and births, and the same anchors.
	sub = read(oracle.ReadOptions{Only: []string{"c2"}, Also: refs})
	var want2 []oracle.Base
	for _, b := range wantBases {
		if b.Collection == "c2" {
			want2 = append(want2, b)
		}
	}
	if got := sortedBases(sub.Bases); !slices.Equal(got, want2) {
		t.Errorf("bases of c2:\n got %v\nwant %v", got, want2)
	}
	if n := len(sub.Births); n != 3 {
		t.Errorf("read %d births of c2 one by one, want 3: %v", n, sub.Births)
	}

	// Roots of a row class are read one by one; children of it are not; a sample is drawn by seed.
	sub = read(oracle.ReadOptions{RowClasses: []string{"order"}})
	var codes []string
	for _, b := range sub.Births {
		codes = append(codes, b.Ref())
	}
	if want := []string{"c1:r1", "c1:r2", "c2:r1"}; !slices.Equal(codes, want) {
		t.Errorf("row-class births %v, want %v", codes, want)
	}
	first, again, other := read(oracle.ReadOptions{Sample: 5, Seed: 7}), read(oracle.ReadOptions{Sample: 5, Seed: 7}),
		read(oracle.ReadOptions{Sample: 5, Seed: 8})
	// About the sample's size (the births whose id hashes to 0 modulo births / sample), the same for the same seed.
	if n := len(first.Births); n < 1 || n >= len(births) || !slices.EqualFunc(first.Births, again.Births, sameBirth) {
		t.Errorf("a sample of about 5 by seed 7: %v, then %v", first.Births, again.Births)
	}
	if slices.EqualFunc(first.Births, other.Births, sameBirth) {
		t.Errorf("seeds 7 and 8 drew the same sample %v", first.Births)
	}
}

func sameBirth(a, b oracle.Birth) bool { return reflect.DeepEqual(a, b) }

func sortedBases(bases []oracle.Base) []oracle.Base {
	out := slices.Clone(bases)
	slices.SortFunc(out, func(a, b oracle.Base) int {
		return cmpKeys(a.Class+"\x00"+a.Collection+"\x00"+a.Lifecycle, b.Class+"\x00"+b.Collection+"\x00"+b.Lifecycle)
	})
	return out
}

func cmpKeys(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
