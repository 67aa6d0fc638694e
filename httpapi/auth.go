package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"slices"
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
	AccessApprover Access = "approver" // a token carrying the approver role (activating a ruleset)
)

// CheckListen is run before anything starts: it refuses a malformed address, --insecure-no-auth on an address that
// is not loopback-only (an empty host listens on every interface), and a non-loopback address with no API token
// (every endpoint would answer 401 to the network, which is a misconfiguration, not a deployment).
func CheckListen(cfg gcos.HTTPConfig, principals []gcos.Principal) error {
	principalTokens := slices.ContainsFunc(principals, func(p gcos.Principal) bool { return len(p.Tokens) > 0 })
	host, _, err := net.SplitHostPort(cfg.Listen)
	if err != nil {
		return gcos.Errorf(gcos.EINVALID, "--listen %s: want host:port", gcos.Quote(cfg.Listen))
	}
	if loopbackHost(host) {
		return nil
	}
	if cfg.InsecureNoAuth {
		return gcos.Errorf(gcos.EINVALID, "--insecure-no-auth is only allowed on a loopback --listen address (127.0.0.1, ::1, localhost), not %s", gcos.Quote(cfg.Listen))
	}
	if len(cfg.ReaderTokens)+len(cfg.OperatorTokens) == 0 && !principalTokens {
		return gcos.Errorf(gcos.EINVALID, "--listen %s is not a loopback address and no API token is configured: set GCOS_READER_TOKEN and/or GCOS_OPERATOR_TOKEN (or http.reader_tokens / http.operator_tokens in --config), or listen on 127.0.0.1", gcos.Quote(cfg.Listen))
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

// Caller is who a request acts as: the principal its token authenticates and the roles that token carries.
type Caller struct {
	Principal string
	Roles     []string
	// Local: the daemon's run token (or --insecure-no-auth on loopback), held by whoever can read the data dir and
	// so the database credential beside it. It acts as the principal the CLI names (PrincipalHeader), checked
	// against the configured principals like the CLI's --by on the database path.
	Local bool
}

// PrincipalHeader carries the CLI's --by to the daemon on the run token; any other token ignores it.
const PrincipalHeader = "X-GCOS-Principal"

// OSUserHeader carries the operating-system user the CLI runs as, recorded beside the principal.
const OSUserHeader = "X-GCOS-OS-User"

// localPrincipal is a local caller that names no principal.
const localPrincipal = "local"

// holds reports whether the caller's token carries role.
func (c Caller) holds(role string) bool { return slices.Contains(c.Roles, role) }

// tokenEntry is one configured token: its digest and the caller it authenticates.
type tokenEntry struct {
	digest tokenDigest
	caller Caller
}

// authenticator holds the configured tokens as digests.
type authenticator struct {
	tokens   []tokenEntry
	insecure bool
	logins   *Logins // the dashboard's sessions
	// compare is subtle.ConstantTimeCompare; a field only so a test can count that every token is compared.
	compare func(x, y []byte) int
}

// anonymousPrincipal names the caller of a plain http.*_tokens token: "token:" and the first bytes of its
// digest, so one token is one identity (it cannot approve what it proposed) without its text ever being shown.
func anonymousPrincipal(d tokenDigest) string { return fmt.Sprintf("token:%x", d[:4]) }

// newAuthenticator reads the tokens: each principal's (acting as it, with its roles), the plain reader and
// operator tokens (acting as an identity of their own; with no principals configured an operator token may also
// approve, as before principals existed), and the daemon's local tokens.
func newAuthenticator(cfg gcos.HTTPConfig, principals []gcos.Principal, logins *Logins) (*authenticator, error) {
	a := &authenticator{insecure: cfg.InsecureNoAuth, logins: logins, compare: subtle.ConstantTimeCompare}
	add := func(kind, t string, c func(tokenDigest) Caller) error {
		if strings.TrimSpace(t) == "" || t != strings.TrimSpace(t) {
			return gcos.Errorf(gcos.EINVALID, "http: a %s token is empty or has surrounding spaces", kind)
		}
		d := sha256.Sum256([]byte(t))
		for _, e := range a.tokens {
			if e.digest == d {
				return gcos.Errorf(gcos.EINVALID, "http: a %s token is configured twice", kind)
			}
		}
		a.tokens = append(a.tokens, tokenEntry{digest: d, caller: c(d)})
		return nil
	}
	for _, p := range principals {
		for _, t := range p.Tokens {
			if err := add("principal's", t, func(tokenDigest) Caller { return Caller{Principal: p.Name, Roles: p.Roles} }); err != nil {
				return nil, err
			}
		}
	}
	operatorRoles := []string{gcos.RoleReader, gcos.RoleOperator}
	if len(principals) == 0 {
		operatorRoles = append(operatorRoles, gcos.RoleApprover)
	}
	for _, list := range []struct {
		kind   string
		tokens []string
		roles  []string
	}{{"reader", cfg.ReaderTokens, []string{gcos.RoleReader}}, {"operator", cfg.OperatorTokens, operatorRoles}} {
		for _, t := range list.tokens {
			if err := add(list.kind, t, func(d tokenDigest) Caller { return Caller{Principal: anonymousPrincipal(d), Roles: list.roles} }); err != nil {
				return nil, err
			}
		}
	}
	for _, t := range cfg.LocalTokens {
		if err := add("local", t, func(tokenDigest) Caller { return Caller{Roles: gcos.PrincipalRoles, Local: true} }); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// caller returns who the presented token authenticates. It compares the token's digest with every configured
// token, with no early exit, so the time taken does not say which token (or how much of one) matched.
func (a *authenticator) caller(token string) (Caller, bool) {
	d := sha256.Sum256([]byte(token))
	match := -1
	for i := range a.tokens {
		if a.compare(d[:], a.tokens[i].digest[:]) == 1 {
			match = i
		}
	}
	if match < 0 {
		return Caller{}, false
	}
	return a.tokens[match].caller, true
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

// check decides whether r may call a route of the given access. It returns the caller, or the error to answer with.
// A bearer token is checked first (a wrong one is a 401, also with --insecure-no-auth); with none, the dashboard's
// session cookie; with neither, the caller is anonymous: a 401, unless authentication is off.
func (a *authenticator) check(r *http.Request, need Access) (Caller, error) {
	if need == AccessPublic {
		return Caller{}, nil
	}
	c, err := a.authenticate(r)
	if err != nil {
		return Caller{}, err
	}
	switch {
	case need == AccessOperator && !c.holds(gcos.RoleOperator):
		return Caller{}, gcos.Errorf(gcos.EFORBIDDEN, "this endpoint needs an operator token (%s holds %s)", c.Principal, rolesText(c.Roles))
	case need == AccessApprover && !c.holds(gcos.RoleApprover):
		return Caller{}, gcos.Errorf(gcos.EFORBIDDEN, "this endpoint needs an approver's token (%s holds %s)", c.Principal, rolesText(c.Roles))
	}
	return c, nil
}

// authenticate returns who r acts as, whatever the route.
func (a *authenticator) authenticate(r *http.Request) (Caller, error) {
	if token, ok := bearer(r); ok {
		c, ok := a.caller(token)
		if !ok {
			return Caller{}, gcos.Errorf(gcos.EUNAUTHORIZED, "unknown token")
		}
		if c.Local {
			c = localCaller(r, c)
		}
		return c, nil
	}
	if r.Header.Get("Authorization") != "" {
		return Caller{}, gcos.Errorf(gcos.EUNAUTHORIZED, "the Authorization header is not a bearer token (Authorization: Bearer <token>)")
	}
	if c, has, err := a.logins.sessionOf(r); has {
		if err != nil {
			return Caller{}, err
		}
		if c.Local && c.Principal == "" {
			c = localCaller(r, c)
		}
		return c, nil
	}
	if !a.insecure {
		return Caller{}, gcos.Errorf(gcos.EUNAUTHORIZED, "a bearer token is required (Authorization: Bearer <token>); the dashboard signs in with the login link `gcos up` prints (or `gcos login`)")
	}
	// Defence in depth for --insecure-no-auth: serve loopback connections only, and only for a loopback Host
	// (a page that DNS-rebinds its own name to 127.0.0.1 cannot read the API).
	if addr, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		if tcp, ok := addr.(*net.TCPAddr); ok && !tcp.IP.IsLoopback() {
			return Caller{}, gcos.Errorf(gcos.EUNAUTHORIZED, "authentication is off (--insecure-no-auth) and this connection is not on loopback")
		}
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if !loopbackHost(host) {
		return Caller{}, gcos.Errorf(gcos.EFORBIDDEN, "authentication is off (--insecure-no-auth): only loopback host names are served, not %s", gcos.Quote(r.Host))
	}
	return localCaller(r, Caller{Roles: gcos.PrincipalRoles, Local: true}), nil
}

// localCaller names a local caller by the principal the CLI sends, else "local".
func localCaller(r *http.Request, c Caller) Caller {
	c.Principal = clipHeader(r.Header.Get(PrincipalHeader))
	if c.Principal == "" {
		c.Principal = localPrincipal
	}
	return c
}

func rolesText(roles []string) string {
	if len(roles) == 0 {
		return "no role"
	}
	return strings.Join(roles, ", ")
}

// callerKey keys the request's Caller in its context.
type callerKey struct{}

// callerOf returns the caller wrap authenticated for r.
func callerOf(r *http.Request) Caller {
	c, _ := r.Context().Value(callerKey{}).(Caller)
	return c
}

// actor is the caller as GCOS records it: the principal, the name the request gave (a body field, else the CLI's
// --by; recorded, never trusted) and the operating-system user the CLI says it runs as.
func actor(r *http.Request, claimed string) gcos.Actor {
	c := callerOf(r)
	a := gcos.Actor{Principal: c.Principal, Name: claimed, Via: gcos.ViaHTTP, OSUser: clipHeader(r.Header.Get(OSUserHeader))}
	if c.Local {
		a.Via = gcos.ViaCLI
	}
	if a.Name == "" {
		a.Name = clipHeader(r.Header.Get(PrincipalHeader))
	}
	if a.Name == "" {
		a.Name = c.Principal
	}
	return a
}

// clipHeader is a header's value fit to record: trimmed, at most 200 bytes, and nothing that gcos.CheckParam refuses.
func clipHeader(v string) string {
	v = strings.TrimSpace(v)
	if len(v) > 200 || gcos.CheckParam("header", v) != nil {
		return ""
	}
	return v
}
