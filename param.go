package gcos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// MaxParamBytes bounds one input value (a query parameter, a path segment, a CLI flag or argument): object
// references, group keys and filters are all far shorter, and a longer value is a mistake or an attack.
const MaxParamBytes = 512

// CheckParam refuses an input value the database must never see: invalid UTF-8 (PostgreSQL rejects it, which
// would surface as an internal error), NUL and other control characters, and values over MaxParamBytes. The
// message names the parameter, so HTTP (400) and the CLI (exit 2) refuse with the same words.
func CheckParam(name, value string) error {
	switch {
	case !utf8.ValidString(name):
		return Errorf(EINVALID, "parameter %s: the name is not valid UTF-8", Quote(name))
	case len(value) > MaxParamBytes:
		return Errorf(EINVALID, "parameter %s: %d bytes, longer than %d", Quote(name), len(value), MaxParamBytes)
	case !utf8.ValidString(value):
		return Errorf(EINVALID, "parameter %s: not valid UTF-8", Quote(name))
	case strings.IndexByte(value, 0) >= 0:
		return Errorf(EINVALID, "parameter %s: contains a NUL byte", Quote(name))
	case strings.ContainsFunc(value, isControl):
		return Errorf(EINVALID, "parameter %s: contains control characters", Quote(name))
	case strings.ContainsFunc(value, nonPrinting):
		r := []rune(value)[slices.IndexFunc([]rune(value), nonPrinting)]
		return Errorf(EINVALID, "parameter %s: contains the non-printing character %U (a format, bidirectional or unassigned code point)", Quote(name), r)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// nonPrinting is a character that shows as nothing or reorders what follows it (U+202E, U+200B, U+FEFF, …): an
// identifier carrying one can read as another.
func nonPrinting(r rune) bool { return !strconv.IsPrint(r) }

// MaxEchoRunes bounds how much of an input value a message repeats.
const MaxEchoRunes = 64

// Quote is an input value fit to repeat in a message, a log line or a terminal: quoted with Go's escapes (a control
// character, an escape sequence or a bidirectional override shows as \x1b or \u202e and never acts; invalid UTF-8
// shows as \x bytes), and a value longer than MaxEchoRunes characters shortened to them, its length said.
func Quote[S ~string](s S) string {
	v := string(s)
	if utf8.RuneCountInString(v) <= MaxEchoRunes {
		return strconv.Quote(v)
	}
	end := 0
	for n := 0; n < MaxEchoRunes; n++ {
		_, size := utf8.DecodeRuneInString(v[end:])
		end += size
	}
	return strconv.Quote(v[:end]) + fmt.Sprintf("… (%d bytes)", len(v))
}

// Shown is an input value fit to print as a field of its own (a terminal line, a table cell): the value itself when
// every character of it is printable and it is at most MaxEchoRunes long, else Quote(v).
func Shown(v string) string {
	if utf8.ValidString(v) && utf8.RuneCountInString(v) <= MaxEchoRunes && !strings.ContainsFunc(v, func(r rune) bool { return !strconv.IsPrint(r) }) {
		return v
	}
	return Quote(v)
}

// EchoParam is an input value as an answer repeats it: the value itself when CheckParam accepts it, else Shown(v),
// so a refused value never reaches a terminal or a log raw, nor whole when it is long.
func EchoParam(name, v string) string {
	if CheckParam(name, v) == nil {
		return v
	}
	return Shown(v)
}
