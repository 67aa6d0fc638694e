package postgres

// The tailed sources and their rows: what the intake reads, and what the store core's kept counts take.

import (
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"gcos"
)

// TailKind says which columns of a source row GCOS maps, and so which TailRow fields a poll fills.
type TailKind string

// The tailed source kinds.
const (
	TailBirth     TailKind = "birth"     // the born-object inventory (birth_registry)
	TailChangelog TailKind = "changelog" // the change ledger (registry_changelog)
)

// tailFields lists, per kind, the TailRow fields read from a source row (the default column of each is its name).
var tailFields = map[TailKind][]string{
	TailBirth: {"entity_code", "collection_name", "entity_type", "status", "parent_code", "canonical_address",
		"source_system", "actor_ref"},
	TailChangelog: {"entity_type", "entity_code", "action", "changed_by", "alert_level"},
}

// TailSource binds one tailed source: the table, its (timestamp, id) order key and the columns that feed a
// TailRow. The binding is data; every identifier is quoted with pgx.Identifier when the SQL is built.
type TailSource struct {
	Name     string            `json:"name"`                // cursor key and event_pending.entity_table, e.g. birth_registry
	Kind     TailKind          `json:"kind"`                // birth or changelog
	Schema   string            `json:"schema,omitempty"`    // empty: the search path
	Table    string            `json:"table"`               // the source table
	TSColumn string            `json:"ts_column"`           // timestamptz or timestamp, set by the database clock
	IDColumn string            `json:"id_column"`           // integer, from a sequence
	Columns  map[string]string `json:"columns,omitempty"`   // TailRow field → column, for fields not named like their column
	TimeZone string            `json:"time_zone,omitempty"` // timestamp (no tz) sources: the writers' zone; empty = resolve
}

// BirthTailSource is the birth_registry source as the configured source binding names it (through BirthBinding,
// the one mapping of the binding onto the births' columns).
func BirthTailSource(sb gcos.SourceBinding) TailSource {
	b := NewBirthBinding(sb)
	src := TailSource{Name: "birth_registry", Kind: TailBirth, Table: b.Table, TSColumn: b.BornAt, IDColumn: b.ID,
		Columns: map[string]string{}}
	for field, column := range map[string]string{
		"entity_code": b.Code, "collection_name": b.Collection, "entity_type": b.Type, "status": b.Status,
		"parent_code": b.Parent, "canonical_address": b.Canonical, "source_system": b.SourceSystem, "actor_ref": b.Actor,
	} {
		if column != field {
			src.Columns[field] = column
		}
	}
	if len(src.Columns) == 0 {
		src.Columns = nil
	}
	return src
}

// ChangelogTailSource is the registry_changelog source with the substrate's names.
func ChangelogTailSource() TailSource {
	return TailSource{Name: "registry_changelog", Kind: TailChangelog, Table: "registry_changelog",
		TSColumn: "timestamp", IDColumn: "id"}
}

// DefaultTailSources are the sources the intake tails: births (as bound in cfg) and the change ledger.
func DefaultTailSources(b gcos.SourceBinding) []TailSource {
	return []TailSource{BirthTailSource(b), ChangelogTailSource()}
}

var tailNameRE = regexp.MustCompile(`^[a-z][a-z0-9_.]*$`)

// Validate checks the binding's shape (the catalog is checked by CheckTail).
func (src TailSource) Validate() error {
	if !tailNameRE.MatchString(src.Name) || len(src.Name) > 100 {
		return gcos.Errorf(gcos.EINVALID, "tail source name %s: want lower-case letters, digits, _ and .", gcos.Quote(src.Name))
	}
	fields, ok := tailFields[src.Kind]
	if !ok {
		return gcos.Errorf(gcos.EINVALID, "tail source %s: kind %s: want %s or %s", src.Name, gcos.Quote(src.Kind), TailBirth, TailChangelog)
	}
	if src.Table == "" || src.TSColumn == "" || src.IDColumn == "" {
		return gcos.Errorf(gcos.EINVALID, "tail source %s: table, ts_column and id_column are required", src.Name)
	}
	for field, col := range src.Columns {
		if !slices.Contains(fields, field) {
			return gcos.Errorf(gcos.EINVALID, "tail source %s: columns: %s is not a %s field (fields: %s)",
				src.Name, gcos.Quote(field), src.Kind, strings.Join(fields, ", "))
		}
		if col == "" {
			return gcos.Errorf(gcos.EINVALID, "tail source %s: columns.%s: empty column name", src.Name, field)
		}
	}
	return nil
}

// TailRow is one source row handed to the apply step: its order key and the columns GCOS maps. A NULL column
// reads as "".
type TailRow struct {
	Source string    `json:"source"`
	ID     int64     `json:"id"`
	TS     time.Time `json:"ts"` // the order key as an instant (a local-time column is read in the cursor's zone)

	// birth_registry
	EntityCode       string `json:"entity_code,omitempty"`
	CollectionName   string `json:"collection_name,omitempty"`
	EntityType       string `json:"entity_type,omitempty"` // also registry_changelog
	Status           string `json:"status,omitempty"`
	ParentCode       string `json:"parent_code,omitempty"`
	CanonicalAddress string `json:"canonical_address,omitempty"`
	SourceSystem     string `json:"source_system,omitempty"`
	ActorRef         string `json:"actor_ref,omitempty"`

	// registry_changelog
	Action     string `json:"action,omitempty"`
	ChangedBy  string `json:"changed_by,omitempty"`
	AlertLevel string `json:"alert_level,omitempty"`

	// OutOfOrder is "behind" or "future" for a row the poll's sweep handed off outside cursor order (sweep.go), else "".
	OutOfOrder string `json:"out_of_order,omitempty"`
	// Observed marks a change the intake saw in a registry itself (the registry watch), not a row a writer logged: it
	// has no writer to trust or distrust, and the re-scan it asks for reads the registry.
	Observed bool `json:"observed,omitempty"`

	Raw time.Time `json:"-"` // the order key in the column's own type (local wall time for a timestamp column)
}

// Field is the row field a source column feeds (the tail scans into it).
func (r *TailRow) Field(name string) *string {
	switch name {
	case "entity_code":
		return &r.EntityCode
	case "collection_name":
		return &r.CollectionName
	case "entity_type":
		return &r.EntityType
	case "status":
		return &r.Status
	case "parent_code":
		return &r.ParentCode
	case "canonical_address":
		return &r.CanonicalAddress
	case "source_system":
		return &r.SourceSystem
	case "actor_ref":
		return &r.ActorRef
	case "action":
		return &r.Action
	case "changed_by":
		return &r.ChangedBy
	case "alert_level":
		return &r.AlertLevel
	}
	panic("tail: unknown field " + name)
}

// CanonicalRef is the row's canonical address: canonical_address when set, else collection:entity_code, else
// unknown:<id>.
func (r TailRow) CanonicalRef() string {
	switch {
	case r.CanonicalAddress != "":
		return r.CanonicalAddress
	case r.CollectionName != "" && r.EntityCode != "":
		return r.CollectionName + ":" + r.EntityCode
	}
	return "unknown:" + strconv.FormatInt(r.ID, 10)
}

// ObjectRef is the reference a signal carries for the row: its canonical address for a birth, entity_type:code
// for a change, unknown:<id> when neither is known.
func (r TailRow) ObjectRef() string {
	if ref := r.CanonicalRef(); !strings.HasPrefix(ref, "unknown:") {
		return ref
	}
	if r.EntityType != "" && r.EntityCode != "" {
		return r.EntityType + ":" + r.EntityCode
	}
	return "unknown:" + strconv.FormatInt(r.ID, 10)
}

// Actor is the row's actor for event_pending.actor_ref (NOT NULL there).
func (r TailRow) Actor() string {
	switch {
	case r.ActorRef != "":
		return r.ActorRef
	case r.ChangedBy != "":
		return r.ChangedBy
	}
	return "unknown"
}

// Fields are the TailRow fields a source of this kind feeds, in read order.
func (src TailSource) Fields() []string { return tailFields[src.Kind] }

// Names are the source's placeholders bound to its configured identifiers: {t} the (schema-qualified) table, {ts}
// and {id} the order key's columns, and each of its kind's fields by the field's name ({entity_code}, …).
func (src TailSource) Names() Names {
	n := Names{"t": {src.Schema, src.Table}, "ts": {src.TSColumn}, "id": {src.IDColumn}}
	for _, f := range src.Fields() {
		n[f] = pgx.Identifier{src.Column(f)}
	}
	return n
}

// SQL builds text over the source's placeholders (Names.SQL).
func (src TailSource) SQL(text string) string { return src.Names().SQL(text) }

// Column is the source column feeding a TailRow field.
func (src TailSource) Column(field string) string {
	if c, ok := src.Columns[field]; ok {
		return c
	}
	return field
}

// BirthBase is one (class, registry, lifecycle) base group of births.
type BirthBase struct{ Class, Coll, Status string }
