package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"gcos"
	"gcos/events"
	"gcos/gate"
	"gcos/intake"
	"gcos/postgres"
	"gcos/preview"
)

// Config configures the handler New returns.
type Config struct {
	Store *postgres.Store
	// Intake is the running intake stage (its route fallbacks are exported; cursors are listed and reset through it);
	// nil: a stage over Store.
	Intake *intake.Stage
	// Gate is the running gate stage (its view, its re-scanner); nil: a gate over Store that reads through, never
	// re-scans and waits for Intake's progress when asked with a token.
	Gate *gate.Gate
	// Events is the event stage (findings, notifications, event types); nil: one over Store.
	Events   *events.Loop
	HTTP     gcos.HTTPConfig
	Logger   *slog.Logger         // nil discards
	Registry *prometheus.Registry // nil: a fresh registry with the Go and process collectors
	Version  string               // shown by /healthz, the dashboard and gcos_build_info
	// Ready lists conditions /readyz requires besides the database and the gate (the daemon adds its intake).
	Ready []ReadyCheck
	// Logins holds the dashboard's login links and sessions; nil: a new set with the configured lifetimes.
	Logins *Logins
}

// ReadyCheck is one condition /readyz requires; Check returns nil while it holds, else why not (a gcos error's
// message is shown, anything else as a generic text).
type ReadyCheck struct {
	Name  string
	Check func(context.Context) error
}

// readyTimeout bounds /readyz's own checks: a probe must answer quickly either way.
const readyTimeout = time.Second

// Route is one entry of the API's route table: the ServeMux registers exactly these, and the OpenAPI document
// must describe exactly these (a test holds the two together).
type Route struct {
	Method string   `json:"method"`
	Path   string   `json:"path"` // OpenAPI path syntax, which is also ServeMux's ("/" is registered as "/{$}")
	Access Access   `json:"access"`
	Params []string `json:"params,omitempty"` // the query parameters it takes; any other is refused with 400
}

// Pattern is the ServeMux pattern of the route.
func (r Route) Pattern() string {
	if r.Path == "/" {
		return r.Method + " /{$}"
	}
	return r.Method + " " + r.Path
}

// handler answers one request and returns the status it wrote (for the request counter, with no wrapper
// allocated per request).
type handler func(s *server, w http.ResponseWriter, r *http.Request) int

type route struct {
	Route
	h handler
}

// routeTable is the whole API. Keep it small and flat: one line per endpoint.
var routeTable = []route{
	{Route{http.MethodGet, "/v1/gate", AccessReader, []string{"object", "action", "consistency", "at_least", "explain"}}, (*server).gateOne},
	{Route{http.MethodPost, "/v1/gate", AccessReader, []string{"consistency", "at_least", "explain"}}, (*server).gateBatch},
	{Route{http.MethodGet, "/v1/token", AccessReader, nil}, (*server).token},
	{Route{http.MethodGet, "/v1/explain", AccessReader, []string{"object", "group"}}, (*server).explain},
	{Route{http.MethodGet, "/v1/groups", AccessReader, []string{"scope", "object_class", "source_registry", "verdict", "dirty", "after", "limit"}}, (*server).groups},
	{Route{http.MethodGet, "/v1/groups/{key}", AccessReader, nil}, (*server).group},
	{Route{http.MethodGet, "/v1/invariant", AccessReader, []string{"scope"}}, (*server).invariant},
	{Route{http.MethodGet, "/v1/summary", AccessReader, nil}, (*server).summary},
	{Route{http.MethodGet, "/v1/rulesets", AccessReader, nil}, (*server).rulesets},
	{Route{http.MethodGet, "/v1/snapshots", AccessReader, []string{"limit"}}, (*server).snapshots},
	{Route{http.MethodGet, "/v1/findings", AccessReader, []string{"open", "type", "limit"}}, (*server).findings},
	{Route{http.MethodGet, "/v1/findings/{id}", AccessReader, nil}, (*server).finding},
	{Route{http.MethodPost, "/v1/findings/{id}/resolve", AccessOperator, nil}, (*server).resolveFinding},
	{Route{http.MethodGet, "/v1/notifications", AccessReader, []string{"recipient", "limit"}}, (*server).notifications},
	{Route{http.MethodPost, "/v1/notifications/read", AccessReader, nil}, (*server).readNotifications},
	{Route{http.MethodPost, "/v1/notifications/mute", AccessOperator, nil}, (*server).muteNotifications},
	{Route{http.MethodPost, "/v1/notifications/unmute", AccessOperator, nil}, (*server).unmuteNotifications},
	{Route{http.MethodPost, "/v1/notifications/subscribe", AccessOperator, nil}, (*server).subscribeNotifications},
	{Route{http.MethodGet, "/v1/me", AccessReader, nil}, (*server).me},
	{Route{http.MethodGet, "/v1/workers", AccessReader, nil}, (*server).workers},
	{Route{http.MethodGet, "/v1/changes", AccessReader, []string{"after", "since", "limit"}}, (*server).changes},
	{Route{http.MethodGet, "/v1/changes/watch", AccessReader, []string{"after"}}, (*server).watchChanges},
	{Route{http.MethodPost, "/v1/rulesets", AccessOperator, nil}, (*server).propose},
	{Route{http.MethodPost, "/v1/preview", AccessReader, nil}, (*server).preview},
	{Route{http.MethodPost, "/v1/rulesets/{version}/activate", AccessApprover, nil}, (*server).activate},
	{Route{http.MethodPost, "/v1/cursors/{source}/reset", AccessOperator, nil}, (*server).resetCursor},
	{Route{http.MethodGet, "/metrics", AccessReader, nil}, (*server).metrics},
	{Route{http.MethodGet, "/healthz", AccessPublic, nil}, (*server).healthz},
	{Route{http.MethodGet, "/readyz", AccessPublic, nil}, (*server).readyz},
	{Route{http.MethodGet, "/openapi.json", AccessPublic, nil}, (*server).openapi},
	{Route{http.MethodGet, "/", AccessPublic, nil}, (*server).dashboard},
	{Route{http.MethodGet, loginPath, AccessPublic, []string{"code"}}, (*server).login},
	{Route{http.MethodPost, "/v1/login-links", AccessReader, nil}, (*server).mintLoginLink},
	{Route{http.MethodGet, "/static/{file}", AccessPublic, nil}, (*server).static},
	{Route{http.MethodGet, "/favicon.ico", AccessPublic, nil}, (*server).favicon},
	{Route{http.MethodGet, "/v1", AccessPublic, nil}, (*server).index},
	{Route{http.MethodPost, gcos.AuthZENEvaluationPath, AccessReader, nil}, (*server).authzenEvaluation},
	{Route{http.MethodPost, gcos.AuthZENEvaluationsPath, AccessReader, nil}, (*server).authzenEvaluations},
	{Route{http.MethodPost, gcos.AuthZENSearchResourcePath, AccessReader, nil}, (*server).authzenSearchResource},
	{Route{http.MethodGet, gcos.AuthZENMetadataPath, AccessPublic, nil}, (*server).authzenMetadata},
}

// Routes lists every route New registers.
func Routes() []Route {
	out := make([]Route, len(routeTable))
	for i, rt := range routeTable {
		out[i] = rt.Route
	}
	return out
}

// server is the handler New returns.
type server struct {
	routes    []Route         // what GET /v1 lists
	limits    gcos.HTTPConfig // the configured limits, zero values replaced by the defaults
	slots     chan struct{}   // one per request being answered, gate and /healthz excluded
	gateSlots chan struct{}   // the gate's own places
	// The expensive reads' answers, JSON-encoded once per computation: a dashboard's poll is then a copy.
	invariants *cachedRead[[]byte] // by scope
	summaries  *cachedRead[[]byte]
	store      *postgres.Store
	intake     *intake.Stage // the running intake stage
	gate       *gate.Gate    // the running gate stage
	events     *events.Loop  // the event stage: findings, notifications, event types
	previews   *preview.Previewer
	logger     *slog.Logger
	version    string
	auth       *authenticator
	logins     *Logins
	csrf       *http.CrossOriginProtection
	mux        *http.ServeMux
	m          *metrics
	ui         *dashboardAssets
	ready      []ReadyCheck
}

// New builds the API handler. It refuses InsecureNoAuth unless cfg.HTTP.Listen is loopback (the caller must also
// run CheckListen on the address it actually listens on), and registers its metrics in cfg.Registry.
func New(cfg Config) (http.Handler, error) {
	if cfg.Store == nil {
		return nil, errors.New("httpapi: Config.Store is required")
	}
	if cfg.HTTP.InsecureNoAuth {
		if err := CheckListen(cfg.HTTP, cfg.Store.Config().Principals); err != nil {
			return nil, err
		}
	}
	logins := cfg.Logins
	if logins == nil {
		logins = NewLogins(cfg.HTTP.LoginLinkTTL.Duration(), cfg.HTTP.SessionTTL.Duration())
	}
	auth, err := newAuthenticator(cfg.HTTP, cfg.Store.Config().Principals, logins)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reg := cfg.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	ui, err := loadDashboard()
	if err != nil {
		return nil, err
	}
	limits := withDefaults(cfg.HTTP)
	s := &server{
		limits:     limits,
		slots:      make(chan struct{}, limits.MaxConcurrent),
		gateSlots:  make(chan struct{}, limits.MaxConcurrentGate),
		invariants: newCachedRead[[]byte](limits.ReadCacheInterval.Duration()),
		summaries:  newCachedRead[[]byte](limits.ReadCacheInterval.Duration()),
		store:      cfg.Store,
		intake:     cfg.Intake,
		gate:       cfg.Gate,
		events:     cfg.Events,
		previews:   preview.New(cfg.Store),
		logger:     logger.With("system", "httpapi"),
		version:    cfg.Version,
		auth:       auth,
		logins:     logins,
		csrf:       http.NewCrossOriginProtection(),
		mux:        http.NewServeMux(),
		ui:         ui,
	}
	if s.intake == nil && cfg.Store != nil {
		s.intake = intake.New(cfg.Store)
	}
	if s.gate == nil && cfg.Store != nil {
		s.gate = gate.New(cfg.Store, nil, gate.WithHandOff(s.intake.Present))
	}
	if s.events == nil && cfg.Store != nil {
		s.events = events.New(cfg.Store)
	}
	s.ready = append([]ReadyCheck{
		{"database", func(ctx context.Context) error {
			if err := s.store.Pool().Ping(ctx); err != nil {
				return gcos.Errorf(gcos.EUNAVAILABLE, "the database is not reachable")
			}
			return nil
		}},
		{"gate", s.gate.Ready},
	}, cfg.Ready...)
	if s.m, err = newMetrics(reg, s, cfg.Version); err != nil {
		return nil, err
	}
	if !cfg.HTTP.InsecureNoAuth && len(auth.tokens) == 0 {
		s.logger.Warn("no API tokens configured: every endpoint but the health probes and the dashboard shell answers 401; set GCOS_READER_TOKEN / GCOS_OPERATOR_TOKEN or principals[].tokens")
	}
	unrouted := &codeCounter{vec: s.m.requests, route: "unmatched"}
	s.mux.Handle(noRoutePattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { unrouted.inc(s.noRoute(w, r)) }))
	for _, rt := range routeTable {
		s.mux.Handle(rt.Pattern(), s.wrap(rt))
		s.routes = append(s.routes, rt.Route)
	}
	return s, nil
}

// NewServer builds the API handler (New) into an http.Server with the configured timeouts and header limit; its
// own error log (failed handshakes, malformed requests) goes to cfg.Logger at warn level.
func NewServer(cfg Config) (*http.Server, error) {
	h, err := New(cfg)
	if err != nil {
		return nil, err
	}
	l := withDefaults(cfg.HTTP)
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: l.ReadHeaderTimeout.Duration(),
		ReadTimeout:       l.ReadTimeout.Duration(),
		WriteTimeout:      l.WriteTimeout.Duration(),
		IdleTimeout:       l.IdleTimeout.Duration(),
		MaxHeaderBytes:    l.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.With("system", "http").Handler(), slog.LevelWarn),
	}, nil
}

// withDefaults fills the limits a caller left zero (tests, embedders) from gcos.DefaultConfig.
func withDefaults(c gcos.HTTPConfig) gcos.HTTPConfig {
	d := gcos.DefaultConfig().HTTP
	for _, f := range []struct{ v, def *gcos.Duration }{
		{&c.ReadHeaderTimeout, &d.ReadHeaderTimeout}, {&c.ReadTimeout, &d.ReadTimeout}, {&c.WriteTimeout, &d.WriteTimeout},
		{&c.IdleTimeout, &d.IdleTimeout}, {&c.RequestTimeout, &d.RequestTimeout}, {&c.ReadCacheInterval, &d.ReadCacheInterval},
		{&c.WatchPoll, &d.WatchPoll}, {&c.WatchHeartbeat, &d.WatchHeartbeat},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	for _, f := range []struct{ v, def *int }{
		{&c.MaxHeaderBytes, &d.MaxHeaderBytes}, {&c.MaxConcurrent, &d.MaxConcurrent}, {&c.MaxConcurrentGate, &d.MaxConcurrentGate},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	if c.MaxBodyBytes <= 0 {
		c.MaxBodyBytes = d.MaxBodyBytes
	}
	return c
}

// Security headers, shared read-only slices assigned straight into the header map (no per-request allocation).
var (
	hdrCSP        = []string{"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"}
	hdrNoSniff    = []string{"nosniff"}
	hdrDeny       = []string{"DENY"}
	hdrNoReferrer = []string{"no-referrer"}
	hdrJSON       = []string{"application/json"}
	hdrNoStore    = []string{"no-store"}
)

// ServeHTTP sets the security headers on every response, then routes.
func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h["Content-Security-Policy"] = hdrCSP
	h["X-Content-Type-Options"] = hdrNoSniff
	h["X-Frame-Options"] = hdrDeny
	h["Referrer-Policy"] = hdrNoReferrer
	if id := r.Header["X-Request-Id"]; len(id) == 1 && len(id[0]) <= maxRequestID {
		h["X-Request-Id"] = id // the caller's request identifier, echoed (AuthZEN: the PDP MUST answer with it)
	}
	s.mux.ServeHTTP(w, r)
}

// maxRequestID bounds an X-Request-ID echoed back: a longer one is not an identifier.
const maxRequestID = 256

// noRoutePattern catches every request no route takes (the most general pattern: any route is more specific).
const noRoutePattern = "/"

// noRoute answers a request no route takes with the API's JSON error: 405 naming the allowed methods when the
// path exists under another method, else 404.
func (s *server) noRoute(w http.ResponseWriter, r *http.Request) int {
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != "" && pattern != noRoutePattern {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		return writeJSON(w, http.StatusMethodNotAllowed, ErrorBody{Error: ErrorDetail{Code: gcos.EMETHOD,
			Message: fmt.Sprintf("method %s not allowed on %s (allowed: %s)", gcos.Quote(r.Method), gcos.Quote(r.URL.Path), strings.Join(allowed, ", "))}})
	}
	return writeJSON(w, http.StatusNotFound, ErrorBody{Error: ErrorDetail{Code: gcos.ENOTFOUND,
		Message: fmt.Sprintf("no such endpoint: %s (GET /v1 lists them)", gcos.Quote(r.URL.Path))}})
}

// wrap sheds load beyond the route's places, bounds the body, serves the route (serveRoute) and counts the answer.
func (s *server) wrap(rt route) http.Handler {
	counts := &codeCounter{vec: s.m.requests, route: rt.Pattern()}
	slots := s.slots
	switch rt.Path {
	case gatePath, gcos.AuthZENEvaluationPath, gcos.AuthZENEvaluationsPath:
		slots = s.gateSlots
	case "/healthz":
		slots = nil // liveness answers even when every place is taken
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slots != nil {
			select {
			case slots <- struct{}{}:
				defer func() { <-slots }()
			default:
				// Shed load at once rather than queue: a queued request holds a connection and answers late.
				w.Header().Set("Retry-After", "1")
				counts.inc(s.fail(w, r, gcos.Errorf(gcos.EUNAVAILABLE, "too many requests in progress (%d); retry shortly", cap(slots))))
				return
			}
		}
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = http.MaxBytesReader(w, r.Body, s.limits.MaxBodyBytes)
		}
		counts.inc(s.serveRoute(w, r, rt))
	})
}

// serveRoute applies the cross-origin check, the route's access (the caller goes into the request's context) and
// the input check, then the handler; it returns the status answered.
func (s *server) serveRoute(w http.ResponseWriter, r *http.Request, rt route) int {
	if err := s.csrf.Check(r); err != nil {
		return s.fail(w, r, gcos.Errorf(gcos.EFORBIDDEN, "cross-origin request refused"))
	}
	c, err := s.auth.check(r, rt.Access)
	if err != nil {
		return s.fail(w, r, err)
	}
	r = r.WithContext(context.WithValue(r.Context(), callerKey{}, c))
	if err := checkInput(r, rt.Params); err != nil {
		switch {
		case rt.Path == gatePath && r.Method == http.MethodPost:
			return s.gateBatchRefused(w, r, nil, err)
		case rt.Path == gatePath:
			return s.gateRefused(w, r, err)
		}
		return s.fail(w, r, err)
	}
	return rt.h(s, w, r)
}

// checkInput refuses, before any handler runs, what no endpoint takes: a malformed query string, a query parameter
// the route does not declare or one given twice, and any path segment or value that gcos.CheckParam refuses
// (invalid UTF-8, NUL and control characters, over-long values). Handlers then only check meaning.
func checkInput(r *http.Request, allowed []string) error {
	if err := gcos.CheckParam("path", r.URL.Path); err != nil {
		return err
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return gcos.Errorf(gcos.EINVALID, "query string: %v", err)
	}
	for name, values := range q {
		if !slices.Contains(allowed, name) {
			if err := gcos.CheckParam(name, ""); err != nil {
				return err
			}
			if len(allowed) == 0 {
				return gcos.Errorf(gcos.EINVALID, "unknown query parameter %s (this endpoint takes none)", gcos.Quote(name))
			}
			return gcos.Errorf(gcos.EINVALID, "unknown query parameter %s (allowed: %s)", gcos.Quote(name), strings.Join(allowed, ", "))
		}
		if len(values) > 1 {
			return gcos.Errorf(gcos.EINVALID, "query parameter %s given %d times", gcos.Quote(name), len(values))
		}
		if err := gcos.CheckParam(name, values[0]); err != nil {
			return err
		}
	}
	return nil
}

// codeCounter caches the request counter of one route per status code.
type codeCounter struct {
	vec   *prometheus.CounterVec
	route string
	byKey sync.Map // int → prometheus.Counter
}

func (c *codeCounter) inc(code int) {
	if v, ok := c.byKey.Load(code); ok {
		v.(prometheus.Counter).Inc()
		return
	}
	ctr := c.vec.WithLabelValues(c.route, strconv.Itoa(code))
	c.byKey.Store(code, ctr)
	ctr.Inc()
}

// writeJSON answers with v as JSON; API answers are never cached.
func writeJSON(w http.ResponseWriter, status int, v any) int {
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Cache-Control"] = hdrNoStore
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
	return status
}

// writeEncoded answers with an already encoded JSON body.
func writeEncoded(w http.ResponseWriter, status int, body []byte) int {
	h := w.Header()
	h["Content-Type"] = hdrJSON
	h["Cache-Control"] = hdrNoStore
	w.WriteHeader(status)
	_, _ = w.Write(body)
	return status
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail carries a gcos error code and a message safe to show.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// statusOf maps a gcos error code to its HTTP status.
func statusOf(code string) int {
	switch code {
	case gcos.EINVALID:
		return http.StatusBadRequest
	case gcos.ENOTFOUND:
		return http.StatusNotFound
	case gcos.ECONFLICT:
		return http.StatusConflict
	case gcos.EUNAUTHORIZED:
		return http.StatusUnauthorized
	case gcos.EFORBIDDEN:
		return http.StatusForbidden
	case gcos.EUNAVAILABLE:
		return http.StatusServiceUnavailable
	case gcos.EGONE:
		return http.StatusGone
	case gcos.EMETHOD:
		return http.StatusMethodNotAllowed
	}
	return http.StatusInternalServerError
}

// fail answers with err mapped to a status. Only internal errors are logged, and their details never reach the
// client; a dependency that timed out or could not be reached is 503, not a bug.
func (s *server) fail(w http.ResponseWriter, r *http.Request, err error) int {
	status, detail := s.errorAnswer(r, err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="gcos"`)
	}
	return writeJSON(w, status, ErrorBody{Error: detail})
}

// errorAnswer is the status and body detail of an error answer (an httpError's own status, else its code's).
func (s *server) errorAnswer(r *http.Request, err error) (int, ErrorDetail) {
	var he *httpError
	if errors.As(err, &he) {
		return he.status, ErrorDetail{Code: he.code, Message: he.msg}
	}
	code := gcos.ErrorCode(err)
	msg := gcos.ErrorMessage(err)
	if code == gcos.EINTERNAL {
		var netErr net.Error
		switch {
		case r.Context().Err() != nil:
			// The client went away (or the server is shutting down): whatever the driver said, it is not a bug.
			code, msg = gcos.EUNAVAILABLE, "request canceled"
		case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &netErr):
			code, msg = gcos.EUNAVAILABLE, "the database did not answer in time or is unreachable"
		default:
			s.logger.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		}
	}
	return statusOf(code), ErrorDetail{Code: code, Message: msg}
}

// decodeBody reads a JSON request body into v: application/json only, at most the body limit (wrap bounds every
// body), one object, no unknown fields.
func (s *server) decodeBody(r *http.Request, v any) error { return s.decodeJSON(r, v, true) }

// decodeJSON is decodeBody; strict refuses unknown fields (GCOS's own bodies), else they are ignored (a standard's
// bodies, whose receivers must ignore what they do not know).
func (s *server) decodeJSON(r *http.Request, v any, strict bool) error {
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return &httpError{status: http.StatusUnsupportedMediaType, code: gcos.EINVALID, msg: "the body must be JSON (Content-Type: application/json)"}
	}
	dec := json.NewDecoder(r.Body)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return &httpError{status: http.StatusRequestEntityTooLarge, code: gcos.EINVALID, msg: fmt.Sprintf("the body exceeds %d bytes", tooBig.Limit)}
		}
		if errors.Is(err, io.EOF) {
			return gcos.Errorf(gcos.EINVALID, "the body is empty; want a JSON object")
		}
		var netErr net.Error
		if errors.As(err, &netErr) && netErr.Timeout() {
			return &httpError{status: http.StatusRequestTimeout, code: gcos.EINVALID, msg: "the body did not arrive within the read timeout"}
		}
		return gcos.Errorf(gcos.EINVALID, "body: %s", err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return gcos.Errorf(gcos.EINVALID, "body: trailing data after the JSON object")
	}
	return nil
}

// httpError is an error answer whose status is not a plain mapping of its code (413, 415).
type httpError struct {
	status int
	code   string
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// failRequest answers a request-shape error: an httpError with its own status, else fail.
func (s *server) failRequest(w http.ResponseWriter, r *http.Request, err error) int {
	var he *httpError
	if errors.As(err, &he) {
		return writeJSON(w, he.status, ErrorBody{Error: ErrorDetail{Code: he.code, Message: he.msg}})
	}
	return s.fail(w, r, err)
}

// requestContext bounds a request's database work (http.request_timeout).
func (s *server) requestContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.limits.RequestTimeout.Duration())
}
