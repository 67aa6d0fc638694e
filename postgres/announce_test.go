package postgres_test

import (
	"os"
	"strings"
	"testing"

	"gcos"
	"gcos/postgres"
)

// Every event type GCOS announces is in the vocabulary (so it can be registered and activated) and in
// docs/REFERENCE.md (so a subscriber can find it).
func TestAnnouncedEventTypesAreRegisteredAndDocumented(t *testing.T) {
	t.Parallel()
	v, err := gcos.LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	reference, err := os.ReadFile("../docs/REFERENCE.md")
	if err != nil {
		t.Fatal(err)
	}
	types := postgres.AnnouncedEventTypes()
	if len(types) < 40 {
		t.Fatalf("only %d announced types: %v", len(types), types)
	}
	for _, typ := range types {
		if _, ok := v.Lookup(typ); !ok {
			t.Errorf("%s is announced but not in the vocabulary", typ)
		}
		if !strings.Contains(string(reference), "`"+typ+"`") {
			t.Errorf("docs/REFERENCE.md does not list the announced type %s", typ)
		}
	}
	if t.Failed() {
		t.Logf("announced: %s", strings.Join(types, " "))
	}
}
