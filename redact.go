package gcos

import (
	"net/url"
	"regexp"
	"strings"
)

// Redacted stands in for a secret wherever text leaves the process (help, logs, errors, status, panics).
const Redacted = "xxxxx"

var (
	// urlPassword matches the password of a URL's userinfo: scheme://user:PASSWORD@host.
	urlPassword = regexp.MustCompile(`(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^:/?#@\s]*):[^@/?#\s]*@`)
	// keywordPassword matches a libpq keyword/value password: password=PASSWORD or password='PASS WORD'.
	keywordPassword = regexp.MustCompile(`(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'"]+)`)
)

// Redact returns s with the passwords of database URLs and keyword/value connection strings, and every given
// secret (API tokens, a URL's password), replaced by Redacted. Secrets shorter than 4 bytes are not replaced
// (they would mangle ordinary text; the configuration refuses tokens that short anyway).
func Redact(s string, secrets ...string) string {
	for _, sec := range secrets {
		if len(sec) >= 4 {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	if strings.Contains(s, "://") {
		s = urlPassword.ReplaceAllString(s, "${1}:"+Redacted+"@")
	}
	if strings.Contains(strings.ToLower(s), "password") {
		s = keywordPassword.ReplaceAllString(s, "${1}"+Redacted)
	}
	return s
}

// URLSecrets lists the secrets a connection string carries (its password, as given and as URL-escaped), for
// Redact, so they are hidden even where the text around them is no longer a URL.
func URLSecrets(dsn string) []string {
	u, err := url.Parse(dsn)
	if err != nil || u.User == nil {
		if m := keywordPassword.FindStringSubmatch(dsn); m != nil {
			return []string{strings.Trim(m[2], "'")}
		}
		return nil
	}
	pw, ok := u.User.Password()
	if !ok || pw == "" {
		return nil
	}
	return []string{pw, url.QueryEscape(pw), url.PathEscape(pw)}
}
