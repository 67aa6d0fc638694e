package gcos

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Ruleset component names, in the fixed order they enter the canonical JSON (SPEC §6).
const (
	ComponentMeasurements    = "measurements"     // enabled measurement_registry rows
	ComponentCoverageProfile = "coverage_profile" // governance_coverage_profile rows
	ComponentAxis            = "axis"             // interim axis registry: pivot_definitions + law_jurisdiction
	ComponentScopes          = "scopes"           // governance_responsibility_scope rows
	ComponentVerdictPolicy   = "verdict_policy"   // the verdict policy of SPEC §7
)

// Components lists the ruleset components in canonical order.
var Components = []string{
	ComponentMeasurements, ComponentCoverageProfile, ComponentAxis, ComponentScopes, ComponentVerdictPolicy,
}

// Ruleset lifecycle states (governance_ruleset.status); RulesetMissing is what a reader sees for a version that has
// no row at all.
const (
	RulesetDraft      = "draft"
	RulesetActive     = "active"
	RulesetSuperseded = "superseded"
	RulesetMissing    = "missing"
)

// RulesetStatuses lists the states a governance_ruleset row may hold (RulesetMissing is no row).
var RulesetStatuses = []string{RulesetDraft, RulesetActive, RulesetSuperseded}

// MeasurementRule is one enabled measurement_registry row; its text is hashed, never executed.
type MeasurementRule struct {
	MeasurementID string  `json:"measurement_id"`
	LawCode       string  `json:"law_code"`
	Method        *int16  `json:"method"`
	SourceQuery   string  `json:"source_query"`
	TargetQuery   string  `json:"target_query"`
	Comparison    *string `json:"comparison"`
	Severity      *string `json:"severity"`
}

// CoverageProfileRow is one governance_coverage_profile row: risk and coverage requirement of an object class.
type CoverageProfileRow struct {
	EntityType                 string  `json:"entity_type"`
	RiskClass                  *string `json:"risk_class"`
	CoverageRequired           *bool   `json:"coverage_required"`
	Privacy                    *string `json:"privacy"`
	IndependentlyAuthoritative bool    `json:"independently_authoritative"`
	WritePath                  bool    `json:"write_path"`
}

// PivotRow is one pivot_definitions row: which axis family a class belongs to.
type PivotRow struct {
	PivotCode  string  `json:"pivot_code"`
	AxisFamily *string `json:"axis_family"`
	EntityType *string `json:"entity_type"`
}

// JurisdictionRow is one law_jurisdiction row: the scope / class / collection a law's rules govern (null = any).
type JurisdictionRow struct {
	LawCode        string  `json:"law_code"`
	ScopeCode      *string `json:"scope_code"`
	EntityType     *string `json:"entity_type"`
	CollectionName *string `json:"collection_name"`
}

// ScopeRow is one governance_responsibility_scope row.
type ScopeRow struct {
	ScopeCode        string  `json:"scope_code"`
	DefaultOwnerHint *string `json:"default_owner_hint"`
}

// RulesetComponents are the rows a ruleset version is computed from. Row order never matters: rows are sorted by
// their key when hashed. A component whose registry does not exist is named in Absent (its rows must be empty);
// an absent component and a present-but-empty one hash differently, so a registry appearing bumps the ruleset.
type RulesetComponents struct {
	Measurements    []MeasurementRule
	CoverageProfile []CoverageProfileRow
	Pivots          []PivotRow        // axis component, with Jurisdictions
	Jurisdictions   []JurisdictionRow // axis component, with Pivots
	Scopes          []ScopeRow
	Policy          VerdictPolicy
	Absent          []string // component names (Component*) whose registry is absent
}

// IsAbsent reports whether the named component is marked absent.
func (c RulesetComponents) IsAbsent(component string) bool {
	return slices.Contains(c.Absent, component)
}

// Validate checks that Absent names known components, that an absent component carries no rows, and that the
// verdict policy (which always exists: the default applies when none is configured) is valid.
func (c RulesetComponents) Validate() error {
	for _, a := range c.Absent {
		if !slices.Contains(Components, a) {
			return Errorf(EINVALID, "ruleset: absent: unknown component %s (want one of %v)", Quote(a), Components)
		}
	}
	rows := map[string]int{
		ComponentMeasurements:    len(c.Measurements),
		ComponentCoverageProfile: len(c.CoverageProfile),
		ComponentAxis:            len(c.Pivots) + len(c.Jurisdictions),
		ComponentScopes:          len(c.Scopes),
	}
	for _, name := range Components {
		if c.IsAbsent(name) && rows[name] > 0 {
			return Errorf(EINVALID, "ruleset: %s: marked absent but has %d rows", name, rows[name])
		}
	}
	if c.IsAbsent(ComponentVerdictPolicy) {
		return Errorf(EINVALID, "ruleset: verdict_policy: cannot be absent (the default policy applies)")
	}
	if err := c.Policy.Validate(); err != nil {
		return Errorf(EINVALID, "ruleset: %w", err)
	}
	return nil
}

// RulesetSummary is the provenance of what was hashed (governance_ruleset.components).
type RulesetSummary struct {
	MeasurementIDs  []string          `json:"measurement_ids"`
	LawCodes        []string          `json:"law_codes"`
	Absent          []string          `json:"absent"`
	ComponentHashes map[string]string `json:"component_hashes"` // component → sha256 hex of its canonical JSON
	PolicyVersion   int               `json:"policy_version"`
}

// Ruleset is a content-addressed ruleset version.
type Ruleset struct {
	Version     string         `json:"ruleset_version"` // "gov-rs-" + first 12 hex of ContentHash
	ContentHash string         `json:"content_hash"`    // sha256 hex of Canonical
	Canonical   []byte         `json:"-"`               // the canonical JSON that was hashed
	Summary     RulesetSummary `json:"components"`
}

// RulesetVersionPrefix starts every ruleset version.
const RulesetVersionPrefix = "gov-rs-"

// rulesetVersionLen is the length of a ruleset version: the prefix and 12 hex digits of the content hash.
const rulesetVersionLen = len(RulesetVersionPrefix) + 12

// CheckRulesetVersion refuses, with EINVALID, what cannot be a ruleset version (gov-rs- and 12 lowercase hex
// digits): a typo is a usage error, not a version that happens not to exist.
func CheckRulesetVersion(v string) error {
	hexPart, ok := strings.CutPrefix(v, RulesetVersionPrefix)
	if !ok || len(v) != rulesetVersionLen || strings.ContainsFunc(hexPart, func(r rune) bool { return !strings.ContainsRune("0123456789abcdef", r) }) {
		return Errorf(EINVALID, "ruleset version %s: want gov-rs- and 12 hex digits", Quote(v))
	}
	return nil
}

// ComputeRuleset hashes the components into a ruleset version. The canonical JSON is an array of the five
// components in the order of Components; a present component is {"component":X,"state":"present",...rows},
// an absent one exactly {"component":X,"state":"absent"} (rows of a component marked absent are ignored; call
// Validate first to refuse them). Strings are encoded as JSON without HTML escaping.
func ComputeRuleset(c RulesetComponents) Ruleset {
	enc := encodeComponents(c)
	var canonical bytes.Buffer
	canonical.WriteByte('[')
	hashes := make(map[string]string, len(Components))
	for i, name := range Components {
		if i > 0 {
			canonical.WriteByte(',')
		}
		canonical.Write(enc.json[name])
		hashes[name] = sha256Hex(enc.json[name])
	}
	canonical.WriteByte(']')

	sum := sha256Hex(canonical.Bytes())
	summary := RulesetSummary{
		MeasurementIDs:  []string{},
		LawCodes:        []string{},
		Absent:          []string{},
		ComponentHashes: hashes,
		PolicyVersion:   c.Policy.Version,
	}
	for _, name := range Components {
		if c.IsAbsent(name) {
			summary.Absent = append(summary.Absent, name)
		}
	}
	if !c.IsAbsent(ComponentMeasurements) {
		for _, m := range c.Measurements {
			summary.MeasurementIDs = append(summary.MeasurementIDs, m.MeasurementID)
			summary.LawCodes = append(summary.LawCodes, m.LawCode)
		}
	}
	summary.MeasurementIDs = sortedUnique(summary.MeasurementIDs)
	summary.LawCodes = sortedUnique(summary.LawCodes)
	return Ruleset{
		Version:     RulesetVersionPrefix + sum[:12],
		ContentHash: sum,
		Canonical:   canonical.Bytes(),
		Summary:     summary,
	}
}

// encodedRow is one row's canonical JSON and its key.
type encodedRow struct {
	key  string
	json []byte
}

// encoded holds each component's canonical JSON and its rows by key (for diffs).
type encoded struct {
	json map[string][]byte
	rows map[string]map[string][]encodedRow // component ("pivots"/"jurisdictions" for axis) → key → rows
}

// encodeComponents produces the canonical encoding of every component.
func encodeComponents(c RulesetComponents) encoded {
	e := encoded{json: map[string][]byte{}, rows: map[string]map[string][]encodedRow{}}
	present := func(name string) bool { return !c.IsAbsent(name) }

	if present(ComponentMeasurements) {
		rows := encodeRows(c.Measurements, func(m MeasurementRule) string { return m.MeasurementID })
		e.rows["measurements"] = byKey(rows)
		e.json[ComponentMeasurements] = componentJSON(ComponentMeasurements, "rows", rows)
	}
	if present(ComponentCoverageProfile) {
		rows := encodeRows(c.CoverageProfile, func(r CoverageProfileRow) string { return r.EntityType })
		e.rows["coverage_profile"] = byKey(rows)
		e.json[ComponentCoverageProfile] = componentJSON(ComponentCoverageProfile, "rows", rows)
	}
	if present(ComponentAxis) {
		pivots := encodeRows(c.Pivots, func(r PivotRow) string { return r.PivotCode })
		juris := encodeRows(c.Jurisdictions, func(r JurisdictionRow) string { return r.LawCode })
		e.rows["pivots"] = byKey(pivots)
		e.rows["jurisdictions"] = byKey(juris)
		var b bytes.Buffer
		b.WriteString(`{"component":"axis","state":"present","pivots":`)
		b.Write(rowArray(pivots))
		b.WriteString(`,"jurisdictions":`)
		b.Write(rowArray(juris))
		b.WriteByte('}')
		e.json[ComponentAxis] = b.Bytes()
	}
	if present(ComponentScopes) {
		rows := encodeRows(c.Scopes, func(r ScopeRow) string { return r.ScopeCode })
		e.rows["scopes"] = byKey(rows)
		e.json[ComponentScopes] = componentJSON(ComponentScopes, "rows", rows)
	}
	if present(ComponentVerdictPolicy) {
		var b bytes.Buffer
		b.WriteString(`{"component":"verdict_policy","state":"present","policy":`)
		b.Write(canonicalJSON(c.Policy))
		b.WriteByte('}')
		e.json[ComponentVerdictPolicy] = b.Bytes()
	}
	for _, name := range Components {
		if _, ok := e.json[name]; !ok {
			e.json[name] = []byte(`{"component":` + strconv.Quote(name) + `,"state":"absent"}`)
		}
	}
	return e
}

// encodeRows encodes rows canonically and sorts them by key, then by encoding, so input order never matters.
func encodeRows[T any](rows []T, key func(T) string) []encodedRow {
	out := make([]encodedRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, encodedRow{key: key(r), json: canonicalJSON(r)})
	}
	slices.SortFunc(out, func(a, b encodedRow) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return bytes.Compare(a.json, b.json)
	})
	return out
}

// byKey indexes encoded rows by key (a registry without a primary key could repeat one).
func byKey(rows []encodedRow) map[string][]encodedRow {
	m := map[string][]encodedRow{}
	for _, r := range rows {
		m[r.key] = append(m[r.key], r)
	}
	return m
}

// rowArray joins encoded rows into a JSON array.
func rowArray(rows []encodedRow) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, r := range rows {
		if i > 0 {
			b.WriteByte(',')
		}
		b.Write(r.json)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// componentJSON wraps encoded rows as a present component.
func componentJSON(name, field string, rows []encodedRow) []byte {
	return []byte(`{"component":` + strconv.Quote(name) + `,"state":"present","` + field + `":` + string(rowArray(rows)) + `}`)
}

// canonicalJSON encodes v compactly, fields in struct order, map keys sorted, without HTML escaping.
// Types hashed here are plain structs of strings, numbers and bools, which cannot fail to encode.
func canonicalJSON(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		panic(fmt.Sprintf("gcos: canonical JSON of %T: %v", v, err))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

// sha256Hex is lowercase hex of sha256(b).
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// sortedUnique sorts s and drops repeats; never returns nil.
func sortedUnique(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	out = slices.Compact(out)
	if out == nil {
		out = []string{}
	}
	return out
}

// SystemProposer proposes the drafts GCOS computes itself from the registries (a full audit, a backfill): a
// known proposer, never an approver.
const SystemProposer = "gcos"

// RulesetOwnership says whether a ruleset is owned: proposed by a configured principal (or by GCOS itself) and,
// once active, approved by a configured principal holding the approver role. It returns why not, in words; with no
// principals configured the check is off (ok, nothing to say).
func RulesetOwnership(proposer, approver string, active bool, principals []Principal) (ok bool, reasons []string) {
	if len(principals) == 0 {
		return true, nil
	}
	find := func(name string) (Principal, bool) {
		i := slices.IndexFunc(principals, func(p Principal) bool { return p.Name == name })
		if i < 0 {
			return Principal{}, false
		}
		return principals[i], true
	}
	if _, known := find(proposer); !known && proposer != SystemProposer {
		reasons = append(reasons, fmt.Sprintf("proposer %q is not a configured principal", proposer))
	}
	if active {
		switch p, known := find(approver); {
		case approver == "":
			reasons = append(reasons, "active without an approver on record")
		case !known:
			reasons = append(reasons, fmt.Sprintf("approver %q is not a configured principal", approver))
		case !slices.Contains(p.Roles, RoleApprover):
			reasons = append(reasons, fmt.Sprintf("approver %q does not hold the approver role", approver))
		}
	} else {
		reasons = append(reasons, "a draft judges: no approver has ratified the ruleset verdicts are read under")
	}
	return len(reasons) == 0, reasons
}
