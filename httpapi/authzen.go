package httpapi

import (
	"log/slog"
	"net/http"
	"strings"
	"time"

	"gcos"
	"gcos/gate"
)

// The gate spoken as OpenID AuthZEN Authorization API 1.0 (SPEC §13): the mapping is gcos.AuthZENEvaluation.Resolve;
// here each endpoint reads the standard's body, asks the gate, and answers in the standard's shape. A deny is 200
// {"decision": false}; a body the standard does not describe is 400 (the body still says "decision": false).

// AuthZENRefusal is the answer to a request the standard's shape does not describe: 400 with the error, and a deny
// for a client that reads only "decision".
type AuthZENRefusal struct {
	Decision bool        `json:"decision"`
	Error    ErrorDetail `json:"error"`
}

// authzenRefused answers a request that cannot be evaluated at all.
func (s *server) authzenRefused(w http.ResponseWriter, r *http.Request, err error) int {
	status, detail := s.errorAnswer(r, err)
	s.m.observeGate(r, gcos.GateBlock, "", 0)
	return writeJSON(w, status, AuthZENRefusal{Error: detail})
}

// authzenBody reads an AuthZEN request body: JSON only, unknown fields ignored as the standard asks.
func (s *server) authzenBody(r *http.Request) (gcos.AuthZENRequest, gcos.AuthZENOptions, gate.GateOptions, error) {
	var req gcos.AuthZENRequest
	if err := s.decodeJSON(r, &req, false); err != nil {
		return req, gcos.AuthZENOptions{}, gate.GateOptions{}, err
	}
	o := req.Opts()
	opt, err := gateOptions(o.Consistency, o.AtLeast, "options.")
	return req, o, opt, err
}

// authzenEvaluation answers POST /access/v1/evaluation: one object, one action, {"decision": true|false}.
func (s *server) authzenEvaluation(w http.ResponseWriter, r *http.Request) int {
	start := time.Now()
	req, o, opt, err := s.authzenBody(r)
	if err != nil {
		return s.authzenRefused(w, r, err)
	}
	it := req.AuthZENEvaluation.Resolve(s.store.Config().Gate.AuthZENActions)
	if it.Err != nil {
		return s.authzenRefused(w, r, it.Err) // a required attribute missing: the standard's 400
	}
	var a gcos.GateAnswer
	if it.Deny == "" {
		res := s.gate.GateWith(r.Context(), it.Check.Object, it.Check.Action, opt)
		if res.Refused != nil {
			return s.authzenRefused(w, r, res.Refused) // a token the database never issued
		}
		a = res.Answer()
	}
	d := it.Decide(a, o.Explain)
	s.recordAuthZEN(r, []gcos.AuthZENItem{it}, []gcos.AuthZENDecision{d}, a.Source, time.Since(start))
	return writeJSON(w, http.StatusOK, d)
}

// authzenEvaluations answers POST /access/v1/evaluations: the items (the top-level fields their defaults) asked of
// the gate as one batch, from one instant, answered in request order and cut short as the semantic says. An item
// that cannot be evaluated is a deny with context.error, never a partial allow.
func (s *server) authzenEvaluations(w http.ResponseWriter, r *http.Request) int {
	start := time.Now()
	req, o, opt, err := s.authzenBody(r)
	if err != nil {
		return s.authzenRefused(w, r, err)
	}
	semantic, err := o.Semantic()
	if err != nil {
		return s.authzenRefused(w, r, err)
	}
	conf := s.store.Config().Gate
	items, err := req.Items(conf.BatchMax, conf.AuthZENActions)
	if err != nil {
		return s.authzenRefused(w, r, err)
	}
	answers := make([]gcos.GateAnswer, len(items))
	var checks []gcos.GateCheck
	var asked []int // the items the gate is asked about, by index
	for i, it := range items {
		if it.Err == nil && it.Deny == "" {
			checks, asked = append(checks, it.Check), append(asked, i)
		}
	}
	var source string
	if len(checks) > 0 {
		res := s.gate.GateBatch(r.Context(), checks, opt)
		if res.Refused != nil {
			return s.authzenRefused(w, r, res.Refused)
		}
		for j, a := range res.Answers() {
			a.AsOf, a.Source, a.Token = res.AsOf, res.Source, res.Token
			answers[asked[j]] = a
		}
		source = res.Source
	}
	ds := make([]gcos.AuthZENDecision, len(items))
	for i, it := range items {
		ds[i] = it.Decide(answers[i], o.Explain)
	}
	s.recordAuthZEN(r, items, ds, source, time.Since(start))
	if len(req.Evaluations) == 0 {
		return writeJSON(w, http.StatusOK, ds[0]) // the standard's backwards-compatible single evaluation
	}
	return writeJSON(w, http.StatusOK, gcos.AuthZENEvaluationsAnswer{Evaluations: gcos.ShortCircuit(semantic, ds, o.Explain)})
}

// recordAuthZEN counts the decisions as the gate's own answers are counted, and records who they were about: the
// subject is the caller's claim (kept in the debug log beside the principal that asked), never what decides.
func (s *server) recordAuthZEN(r *http.Request, items []gcos.AuthZENItem, ds []gcos.AuthZENDecision, source string, took time.Duration) {
	out := gcos.GateBatchAnswer{Source: source}
	for _, d := range ds {
		if d.Decision {
			out.Allowed++
		} else {
			out.Blocked++
		}
	}
	out.Decision = gcos.GateBlock
	if out.Blocked == 0 {
		out.Decision = gcos.GateAllow
	}
	if len(ds) == 1 {
		s.m.observeGate(r, out.Decision, source, took)
	} else {
		s.m.observeGateBatch(r, out, took)
	}
	if !s.logger.Enabled(r.Context(), slog.LevelDebug) {
		return
	}
	by := callerOf(r).Principal
	for i, it := range items {
		s.logger.Debug("authzen decision", "principal", by, "subject_type", it.Subject.Type, "subject_id", it.Subject.ID,
			"object", it.Check.Object, "action", it.Check.Action, "decision", ds[i].Decision)
	}
}

// authzenMetadata answers GET /.well-known/authzen-configuration: the PDP's identifier is the URL the document was
// fetched from (scheme and host), and the endpoints GCOS serves under it.
func (s *server) authzenMetadata(w http.ResponseWriter, r *http.Request) int {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return writeJSON(w, http.StatusOK, gcos.NewAuthZENMetadata(scheme+"://"+r.Host))
}

// authzenSearchResource answers POST /access/v1/search/resource: a page of the objects of resource.type (a
// collection) the action may be done on, every page of one search read from one instant (gate.SearchResources).
func (s *server) authzenSearchResource(w http.ResponseWriter, r *http.Request) int {
	var req gcos.AuthZENSearchRequest
	if err := s.decodeJSON(r, &req, false); err != nil {
		return s.authzenRefused(w, r, err)
	}
	conf := s.store.Config().Gate
	it, limit, token := req.Resolve(conf.BatchMax, conf.AuthZENActions)
	if it.Err != nil {
		return s.authzenRefused(w, r, it.Err)
	}
	out := gcos.AuthZENSearchAnswer{Results: []gcos.AuthZENEntity{}}
	explain := req.Options != nil && req.Options.Explain
	if it.Deny != "" {
		// An action the gate does not answer is allowed on nothing.
		if explain {
			out.Context = &gcos.AuthZENContext{Reason: it.Deny}
		}
		return writeJSON(w, http.StatusOK, out)
	}
	coll, _, _ := strings.Cut(it.Check.Object, ":")
	page, err := s.gate.SearchResources(r.Context(), gate.SearchQuery{Collection: coll, Action: it.Check.Action, Limit: limit, PageToken: token})
	if err != nil {
		return s.authzenRefused(w, r, err)
	}
	for _, code := range page.Codes {
		out.Results = append(out.Results, gcos.AuthZENEntity{Type: coll, ID: code})
	}
	out.Page = gcos.AuthZENPage{NextToken: page.Next, Count: len(page.Codes)}
	if explain {
		out.Context = &gcos.AuthZENContext{AsOf: page.AsOf, Token: page.Token, Source: gate.SourceDatabase}
	}
	return writeJSON(w, http.StatusOK, out)
}
