package httpapi

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"net/url"
	"sync"
	"time"

	"gcos"
)

// The dashboard signs in without a token typed into it: the daemon prints a one-time login link at start (and
// `gcos login`, or POST /v1/login-links, mints another). Opening the link trades its code for a session cookie
// (HttpOnly, SameSite=Strict, host-only) that acts as whoever minted the link, with that caller's roles. The API
// itself keeps bearer tokens; the cookie is only read when a request carries no Authorization header.

// sessionCookie names the dashboard's session cookie.
const sessionCookie = "gcos_session"

// loginPath is the public route that trades a login link's code for a session.
const loginPath = "/login"

// maxOpenLogins bounds the links minted and not yet used, and the sessions open at once: both live in memory.
const maxOpenLogins = 256

// Logins holds the one-time login links and the sessions they opened, in this process's memory: a restart signs
// every browser out and prints a new link. Codes and session ids are kept as SHA-256 digests.
type Logins struct {
	linkTTL, sessionTTL time.Duration
	now                 func() time.Time

	mu       sync.Mutex
	links    map[tokenDigest]login
	sessions map[tokenDigest]login
}

// login is what a link or a session stands for: the caller it acts as, until when.
type login struct {
	caller  Caller
	expires time.Time
}

// NewLogins keeps links for linkTTL (unused) and sessions for sessionTTL (from their sign-in); zero takes the
// defaults of gcos.DefaultConfig.
func NewLogins(linkTTL, sessionTTL time.Duration) *Logins {
	d := gcos.DefaultConfig().HTTP
	if linkTTL <= 0 {
		linkTTL = d.LoginLinkTTL.Duration()
	}
	if sessionTTL <= 0 {
		sessionTTL = d.SessionTTL.Duration()
	}
	return &Logins{linkTTL: linkTTL, sessionTTL: sessionTTL, now: time.Now,
		links: map[tokenDigest]login{}, sessions: map[tokenDigest]login{}}
}

// LocalLink mints a link that signs a browser in as the daemon's local caller (every role, as the run token): the
// one printed at start, for whoever started the daemon. base is the dashboard's URL (http://host:port).
func (l *Logins) LocalLink(base string) (string, time.Time, error) {
	return l.link(base, Caller{Roles: gcos.PrincipalRoles, Local: true})
}

// link mints a one-time link acting as c.
func (l *Logins) link(base string, c Caller) (string, time.Time, error) {
	code, err := secret()
	if err != nil {
		return "", time.Time{}, err
	}
	now := l.now()
	exp := now.Add(l.linkTTL)
	l.mu.Lock()
	defer l.mu.Unlock()
	prune(l.links, now)
	if len(l.links) >= maxOpenLogins {
		return "", time.Time{}, gcos.Errorf(gcos.EUNAVAILABLE, "%d login links are open and unused; use one or wait until they expire", len(l.links))
	}
	l.links[sha256.Sum256([]byte(code))] = login{caller: c, expires: exp}
	return base + loginPath + "?" + url.Values{"code": {code}}.Encode(), exp, nil
}

// redeem trades a link's code for a new session id; a code works once, and not after it expired.
func (l *Logins) redeem(code string) (string, Caller, time.Time, error) {
	d := sha256.Sum256([]byte(code))
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	in, ok := l.links[d]
	delete(l.links, d)
	if !ok || !now.Before(in.expires) {
		return "", Caller{}, time.Time{}, gcos.Errorf(gcos.EUNAUTHORIZED, "this login link is unknown, used already or expired: run `gcos login` for a new one")
	}
	prune(l.sessions, now)
	if len(l.sessions) >= maxOpenLogins {
		return "", Caller{}, time.Time{}, gcos.Errorf(gcos.EUNAVAILABLE, "%d dashboard sessions are open; try again when one expires", len(l.sessions))
	}
	id, err := secret()
	if err != nil {
		return "", Caller{}, time.Time{}, err
	}
	exp := now.Add(l.sessionTTL)
	l.sessions[sha256.Sum256([]byte(id))] = login{caller: in.caller, expires: exp}
	return id, in.caller, exp, nil
}

// session returns the caller of an open session.
func (l *Logins) session(id string) (Caller, bool) {
	d := sha256.Sum256([]byte(id))
	l.mu.Lock()
	defer l.mu.Unlock()
	s, ok := l.sessions[d]
	if !ok || !l.now().Before(s.expires) {
		delete(l.sessions, d)
		return Caller{}, false
	}
	return s.caller, true
}

// prune drops the expired entries of m.
func prune(m map[tokenDigest]login, now time.Time) {
	for k, v := range m {
		if !now.Before(v.expires) {
			delete(m, k)
		}
	}
}

// secret is 256 random bits, URL-safe.
func secret() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", gcos.Errorf(gcos.EINTERNAL, "random: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// sessionOf returns the caller of the request's session cookie: ok false with no cookie, an error for a cookie
// that names no open session (a nil Logins has none).
func (l *Logins) sessionOf(r *http.Request) (Caller, bool, error) {
	if l == nil {
		return Caller{}, false, nil
	}
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return Caller{}, false, nil
	}
	c, ok := l.session(ck.Value)
	if !ok {
		return Caller{}, true, gcos.Errorf(gcos.EUNAUTHORIZED, "the dashboard session expired or the daemon restarted: open a new login link (`gcos login`)")
	}
	return c, true, nil
}

// login answers GET /login?code=…: a valid code sets the session cookie and sends the browser to the dashboard,
// so the code leaves the address bar at once; any other is a 401 page that says how to get a new link.
func (s *server) login(w http.ResponseWriter, r *http.Request) int {
	id, _, exp, err := s.logins.redeem(r.URL.Query().Get("code"))
	if err != nil {
		s.logger.Warn("dashboard login refused", "remote", r.RemoteAddr, "err", gcos.ErrorMessage(err))
		return s.fail(w, r, err)
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", Expires: exp, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	w.Header()["Cache-Control"] = hdrNoStore
	http.Redirect(w, r, "/", http.StatusSeeOther)
	return http.StatusSeeOther
}

// loginLinkAnswer is POST /v1/login-links's answer.
type loginLinkAnswer struct {
	URL       string    `json:"url"`
	ExpiresAt time.Time `json:"expires_at"`
	Principal string    `json:"principal"`
}

// mintLoginLink answers POST /v1/login-links: a one-time link that signs a browser in as the caller, with the
// caller's roles (a reader's link opens a reader's session). The link's host is the one the request was sent to.
func (s *server) mintLoginLink(w http.ResponseWriter, r *http.Request) int {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	c := callerOf(r)
	link, exp, err := s.logins.link(scheme+"://"+r.Host, c)
	if err != nil {
		return s.fail(w, r, err)
	}
	w.Header()["Cache-Control"] = hdrNoStore
	return writeJSON(w, http.StatusCreated, loginLinkAnswer{URL: link, ExpiresAt: exp.UTC(), Principal: c.Principal})
}
