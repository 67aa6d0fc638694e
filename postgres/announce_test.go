package postgres_test

import (
	"os"
	"slices"
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

// A finding's announcement is addressed as doc 41 §41.5 gives its family: candidate.* at the group's candidate row
// with the verdict, ruleset, snapshot and dirty reason it is about; a system finding at its system_issues row; both
// carry the seeds' bucket where the seeds assign one.
func TestFindingAnnouncementsAreAddressedByFamily(t *testing.T) {
	t.Parallel()
	b := setup(t, 2000)
	res := b.backfill(t)
	b.activate(t, res.RulesetVersion)
	group := b.strs(t, `SELECT group_key FROM governance_candidate_state ORDER BY group_key LIMIT 1`)[0]
	if _, err := b.store.RaiseFinding(b.ctx, gcos.Finding{Type: gcos.IssueCandidateUnknown, Subject: group, Group: group,
		Evidence: map[string]any{"group_key": group}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.RaiseFinding(b.ctx, gcos.Finding{Type: gcos.IssueHandoffLag, Subject: "birth", Evidence: map[string]any{}}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.ResolveFinding(b.ctx, gcos.IssueCandidateUnknown, group, ""); err != nil {
		t.Fatal(err)
	}
	got := b.strs(t, `SELECT event_type_hint || ' ' || entity_table || ' ' || entity_ref || ' ' ||
		coalesce(capture_payload->'safe_payload'->>'transition', '') || ' ' || coalesce(capture_payload->'safe_payload'->>'bucket', '-') || ' ' ||
		coalesce(capture_payload->'safe_payload'->>'candidate_verdict', '-') || ' ' || coalesce(capture_payload->'safe_payload'->>'ruleset_version', '-') || ' ' ||
		(capture_payload->'safe_payload' ? 'source_snapshot_ref')::text
		FROM event_pending WHERE event_type_hint IN ('governance.candidate.unknown', 'governance.handoff.lag') ORDER BY id`)
	verdict := b.strs(t, `SELECT candidate_verdict FROM governance_candidate_state WHERE group_key = $1`, group)[0]
	want := []string{
		"governance.candidate.unknown governance_candidate_state " + group + " opened thiếu_quan_hệ " + verdict + " " + res.RulesetVersion + " true",
		"governance.handoff.lag system_issues gov:handoff:lag:birth opened sai_lệch_dữ_liệu - - false",
		"governance.candidate.unknown governance_candidate_state " + group + " resolved thiếu_quan_hệ " + verdict + " " + res.RulesetVersion + " true",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("announcements\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	// The bucket travels with the finding too.
	if n := b.count(t, `SELECT count(*) FROM system_issues WHERE coalesce_key = 'gov:handoff:lag:birth' AND evidence_snapshot::jsonb->>'bucket' = 'sai_lệch_dữ_liệu'`); n != 1 {
		t.Fatal("the handoff_lag finding does not carry its bucket")
	}
}
