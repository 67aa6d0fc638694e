package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net"
	"net/http"
	"strings"

	"gcos"
)

// Access is who may call a route.
type Access string

// Access levels, weakest first. An operator token also reads.
const (
	AccessPublic   Access = "public"   // no token (health probes, the dashboard shell, the OpenAPI document)
	AccessReader   Access = "reader"   // a reader or an operator token
	AccessOperator Access = "operator" // an operator token (mutating endpoints)
)

// CheckListen is run before anything starts: it refuses a malformed address, --insecure-no-auth on an address that
// is not loopback-only (an empty host listens on every interface), and a non-loopback address with no API token
// (every endpoint would answer 401 to the network, which is a misconfiguration, not a deployment).
func CheckListen(cfg gcos.HTTPConfig) error {
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return gcos.Errorf(gcos.EINVALID, "--listen %q: want host:port", cfg.Listen)
	}
	if loopbackHost(host) {
		return nil
	}
	if cfg.InsecureNoAuth {
		return gcos.Errorf(gcos.EINVALID, "--insecure-no-auth is only allowed on a loopback --listen address (127.0.0.1, ::1, localhost), not %q", cfg.Listen)
	}
	if len(cfg.ReaderTokens)+len(cfg.OperatorTokens) == 0 {
		return gcos.Errorf(gcos.EINVALID, "--listen %q is not a loopback address and no API token is configured: set GCOS_READER_TOKEN and/or GCOS_OPERATOR_TOKEN (or http.reader_tokens / http.operator_tokens in --config), or listen on 127.0.0.1", cfg.Listen)
	}
	return nil
}

// loopbackHost reports whether host names only the local machine.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// tokenDigest is a token's SHA-256: comparing fixed-length digests keeps the comparison constant-time in the
// token's length too (subtle.ConstantTimeCompare returns early on a length mismatch).
type tokenDigest [sha256.Size]byte

// authenticator holds the configured tokens as digests.
type authenticator struct {
	readers   []tokenDigest
	operators []tokenDigest
	insecure  bool
	// compare is subtle.ConstantTimeCompare; a field only so a test can count that every token is compared.
	compare func(x, y []byte) int
}

func newAuthenticator(cfg gcos.HTTPConfig) (*authenticator, error) {
	a := &authenticator{insecure: cfg.InsecureNoAuth, compare: subtle.ConstantTimeCompare}
	for _, list := range []struct {
		name   string
		tokens []string
		into   *[]tokenDigest
	}{{"reader", cfg.ReaderTokens, &a.readers}, {"operator", cfg.OperatorTokens, &a.operators}} {
		for _, t := range list.tokens {
			if strings.TrimSpace(t) == "" || t != strings.TrimSpace(t) {
				return nil, gcos.Errorf(gcos.EINVALID, "http: a %s token is empty or has surrounding spaces", list.name)
			}
			*list.into = append(*list.into, sha256.Sum256([]byte(t)))
		}
	}
	return a, nil
}

// role returns what the presented token may do. It compares the token's digest with every configured token, with
// no early exit, so the time taken does not say which token (or how much of one) matched.
func (a *authenticator) role(token string) (reader, operator bool) {
	d := sha256.Sum256([]byte(token))
	var r, o int
	for i := range a.readers {
		r |= a.compare(d[:], a.readers[i][:])
	}
	for i := range a.operators {
		o |= a.compare(d[:], a.operators[i][:])
	}
	return r == 1 || o == 1, o == 1
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const prefix = "bearer "
	if len(h) <= len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return "", false
	}
	t := strings.TrimSpace(h[len(prefix):])
	return t, t != ""
}

// check decides whether r may call a route of the given access. It returns nil or the error to answer with.
func (a *authenticator) check(r *http.Request, need Access) error {
	if need == AccessPublic {
		return nil
	}
	if a.insecure {
		// Defence in depth for --insecure-no-auth: serve loopback connections only, and only for a loopback Host
		// (a page that DNS-rebinds its own name to 127.0.0.1 cannot read the API).
		if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
			if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
				return gcos.Errorf(gcos.EUNAUTHORIZED, "authentication is off (--insecure-no-auth) and this connection is not on loopback")
			}
		}
		host := r.Host
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		if !loopbackHost(host) {
			return gcos.Errorf(gcos.EFORBIDDEN, "authentication is off (--insecure-no-auth): only loopback host names are served, not %q", r.Host)
		}
		return nil
	}
	token, ok := bearer(r)
	if !ok {
		return gcos.Errorf(gcos.EUNAUTHORIZED, "a bearer token is required (Authorization: Bearer <token>)")
	}
	reader, operator := a.role(token)
	switch {
	case !reader:
		return gcos.Errorf(gcos.EUNAUTHORIZED, "unknown token")
	case need == AccessOperator && !operator:
		return gcos.Errorf(gcos.EFORBIDDEN, "this endpoint needs an operator token")
	}
	return nil
}
