package postgres

// SQL over configured names: the one way GCOS puts a table or column name from the configuration into a statement.

import (
	"regexp"

	"github.com/jackc/pgx/v5"
)

// Names binds the {placeholders} of SQL text to configured identifiers. Each value is one identifier, or a
// schema-qualified one ({"schema", "table"}; an empty part is left out), quoted with pgx.Identifier when the text is
// built, so a configured name can never change a statement's meaning.
type Names map[string]pgx.Identifier

// placeholder is {name}: a lower-case word in braces. SQL that needs a literal brace pair (an array or jsonb path
// literal) binds it as a parameter instead.
var placeholder = regexp.MustCompile(`\{[a-z][a-z0-9_]*\}`)

// SQL returns text with every {name} replaced by its quoted identifier. A placeholder without a name is a
// programming error and panics, so a misspelt one fails the first test that builds the statement.
func (n Names) SQL(text string) string {
	return placeholder.ReplaceAllStringFunc(text, func(p string) string {
		id, ok := n[p[1:len(p)-1]]
		if !ok {
			panic("postgres: SQL names: no identifier bound to " + p)
		}
		return quote(id)
	})
}

// Quote is one identifier (or a qualified one) as SQL text, for the rare statement that is not a template.
func Quote(parts ...string) string { return quote(pgx.Identifier(parts)) }

func quote(id pgx.Identifier) string {
	kept := make(pgx.Identifier, 0, len(id))
	for _, part := range id {
		if part != "" {
			kept = append(kept, part)
		}
	}
	if len(kept) == 0 {
		panic("postgres: SQL names: empty identifier")
	}
	return kept.Sanitize()
}
