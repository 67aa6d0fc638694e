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

// Every type in the vocabulary is emitted by the condition it names: an announcement of GCOS's own or a handoff kind
// the intake signals. A registered type nothing emits would be a subscription that can never fire.
func TestEveryRegisteredTypeIsEmitted(t *testing.T) {
	t.Parallel()
	v, err := gcos.LoadVocabulary()
	if err != nil {
		t.Fatal(err)
	}
	emitted := map[string]bool{}
	for _, typ := range postgres.AnnouncedEventTypes() {
		emitted[typ] = true
	}
	for _, k := range gcos.ChangeKinds {
		emitted[k.EventType()] = true
	}
	for _, e := range v.Types {
		if !emitted[e.EventType] {
			t.Errorf("%s is registered but nothing emits it: emit it where its condition arises, or remove it from the vocabulary with the reason in docs/REFERENCE.md", e.EventType)
		}
	}
}
