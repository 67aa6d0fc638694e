package gcos

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
)

// Glob is the one pattern syntax of GCOS: every configured or stored name pattern (trusted source systems and
// changelog rules in the configuration, event_subscription.event_type and .event_stream) is one. Its syntax is path.Match's
// with one difference: a name is not a path, so `*` matches any run of characters, `/` included ("svc/*" and "*"
// both match "svc/etl", "*" matches "s7-America/New_York"). `?` matches one character, `[…]` a class (`[^…]`
// negates), and `\` escapes the next character. Matching is whole-name.
type Glob struct {
	pattern string
	re      *regexp.Regexp
	// The common shapes are matched without the regexp engine (the intake matches every row): "*", a literal, and
	// (case-sensitive) a literal followed by one "*".
	any             bool
	literal, prefix *string
	fold            bool
}

// ParseGlob compiles a pattern; an empty pattern or a malformed class is an error. With fold, letters match in
// either case.
func ParseGlob(pattern string, fold bool) (Glob, error) {
	if pattern == "" {
		return Glob{}, fmt.Errorf("empty pattern")
	}
	var b strings.Builder
	if fold {
		b.WriteString("(?i)")
	}
	b.WriteString("^")
	rs := []rune(pattern)
	for i := 0; i < len(rs); i++ {
		switch c := rs[i]; c {
		case '*':
			b.WriteString("(?s:.*)")
		case '?':
			b.WriteString("(?s:.)")
		case '\\':
			if i+1 == len(rs) {
				return Glob{}, fmt.Errorf("pattern %s ends with a lone \\", Quote(pattern))
			}
			i++
			b.WriteString(regexp.QuoteMeta(string(rs[i])))
		case '[':
			end := slices.Index(rs[i+1:], ']')
			if end < 0 {
				return Glob{}, fmt.Errorf("pattern %s: unclosed [", Quote(pattern))
			}
			class := string(rs[i+1 : i+1+end])
			if class == "" || class == "^" {
				return Glob{}, fmt.Errorf("pattern %s: empty class", Quote(pattern))
			}
			neg := strings.HasPrefix(class, "^")
			class = strings.TrimPrefix(class, "^")
			b.WriteString("[")
			if neg {
				b.WriteString("^")
			}
			// Ranges (`a-z`) and escapes keep their meaning; a `[` inside is literal.
			b.WriteString(strings.ReplaceAll(class, `[`, `\[`))
			b.WriteString("]")
			i += end + 1
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	re, err := regexp.Compile(b.String())
	if err != nil {
		var se *syntax.Error
		if errors.As(err, &se) {
			return Glob{}, fmt.Errorf("pattern %s: %s: %s", Quote(pattern), se.Code, Quote(se.Expr))
		}
		return Glob{}, fmt.Errorf("pattern %s: %w", Quote(pattern), err)
	}
	g := Glob{pattern: pattern, re: re, fold: fold}
	switch head := strings.TrimSuffix(pattern, "*"); {
	case pattern == "*":
		g.any = true
	case !strings.ContainsAny(pattern, `*?[\`):
		g.literal = &pattern
	case !strings.ContainsAny(head, `*?[\`):
		g.prefix = &head
	}
	return g, nil
}

// Match reports whether name matches the whole pattern.
func (g Glob) Match(name string) bool {
	switch {
	case g.re == nil:
		return false
	case g.any:
		return true
	case g.literal != nil && !g.fold:
		return name == *g.literal
	case g.literal != nil:
		return strings.EqualFold(name, *g.literal)
	case g.prefix != nil && !g.fold:
		return strings.HasPrefix(name, *g.prefix)
	}
	return g.re.MatchString(name)
}

// LiteralPrefix is the pattern's literal text before its first wildcard, and whether that is the whole pattern (a
// literal): what an index or a LIKE can narrow a search with before Match decides.
func (g Glob) LiteralPrefix() (prefix string, literal bool) {
	i := strings.IndexAny(g.pattern, `*?[\`)
	if i < 0 {
		return g.pattern, true
	}
	return g.pattern[:i], false
}

// String is the pattern as written.
func (g Glob) String() string { return g.pattern }

// globs caches compiled patterns: the intake matches every row against the same few.
var globs sync.Map // globKey → Glob (nil re when malformed)

type globKey struct {
	pattern string
	fold    bool
}

// MatchGlob matches name against one pattern (ParseGlob), compiled once per process; a malformed pattern matches
// nothing (configuration validation refuses it first).
func MatchGlob(pattern, name string, fold bool) bool {
	k := globKey{pattern, fold}
	g, ok := globs.Load(k)
	if !ok {
		parsed, _ := ParseGlob(pattern, fold)
		g, _ = globs.LoadOrStore(k, parsed)
	}
	return g.(Glob).Match(name)
}
