package gcos

import (
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
		return Errorf(EINVALID, "parameter %q: the name is not valid UTF-8", name)
	case len(value) > MaxParamBytes:
		return Errorf(EINVALID, "parameter %q: %d bytes, longer than %d", name, len(value), MaxParamBytes)
	case !utf8.ValidString(value):
		return Errorf(EINVALID, "parameter %q: not valid UTF-8", name)
	case strings.IndexByte(value, 0) >= 0:
		return Errorf(EINVALID, "parameter %q: contains a NUL byte", name)
	case strings.ContainsFunc(value, isControl):
		return Errorf(EINVALID, "parameter %q: contains control characters", name)
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }
