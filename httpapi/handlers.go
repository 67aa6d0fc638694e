package httpapi

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gcos"
	"gcos/events"
	"gcos/gate"
	"gcos/postgres"
)

var hdrDecision = map[string][]string{gcos.GateAllow: {gcos.GateAllow}, gcos.GateBlock: {gcos.GateBlock}}

const gatePath = "/v1/gate"

// GateRefusal is the gate's answer to bad input (400): still a block decision, plus the error naming the
// parameter, so a client that only reads "decision" fails closed and one that reads "error" learns why.
type GateRefusal struct {
	gcos.GateAnswer
	Error ErrorDetail `json:"error"`
}

// ExplainedGateResult is the gate's full answer (explain=1): the lean answer's fields, the full statement and every
// consulted row.
type ExplainedGateResult struct {
	gate.GateResult
	Reason string `json:"reason"`
}

func explained(r gate.GateResult) ExplainedGateResult {
	return ExplainedGateResult{GateResult: r, Reason: r.Answer().Reason}
}

// gateQuery is what a gate request asks besides its checks: the consistency, a token to read at least, and
// whether to explain.
type gateQuery struct {
	opt     gate.GateOptions
	explain bool
}

// parseGateQuery checks the gate's query parameters (their names were checked by wrap).
func parseGateQuery(q url.Values) (gateQuery, error) {
	opt, err := gateOptions(q.Get("consistency"), q.Get("at_least"), "")
	g := gateQuery{opt: opt}
	if err != nil {
		return g, err
	}
	switch v := q.Get("explain"); v {
	case "", "0", "false":
	case "1", "true":
		g.explain = true
	default:
		return g, gcos.Errorf(gcos.EINVALID, "explain %s: want 1 or 0", gcos.Quote(v))
	}
	return g, nil
}

// gateOptions checks a question's freshness demands (named with prefix in the error).
func gateOptions(consistency, atLeast, prefix string) (gate.GateOptions, error) {
	opt := gate.GateOptions{Consistency: consistency, AtLeast: atLeast}
	if c := opt.Consistency; c != "" && !slices.Contains(gate.Consistencies, c) {
		return opt, gcos.Errorf(gcos.EINVALID, "%sconsistency %s: want one of %s", prefix, gcos.Quote(c), strings.Join(gate.Consistencies, ", "))
	}
	if opt.AtLeast != "" {
		if _, err := gcos.ParseConsistencyToken(opt.AtLeast); err != nil {
			return opt, err
		}
	}
	return opt, nil
}

// gateOne answers GET /v1/gate?object=C:E&action=write|read. Allow and block are both answers (200); the body is
// the lean answer, or with explain=1 the full statement and every consulted row. Bad input is 400 with a
// GateRefusal.
func (s *server) gateOne(w http.ResponseWriter, r *http.Request) int {
	start := time.Now()
	q := r.URL.Query()
	object, action := q.Get("object"), q.Get("action")
	if action == "" {
		action = gcos.ActionWrite
	}
	if _, err := postgres.ParseObjectRef(object); err != nil {
		return s.gateRefused(w, r, err)
	}
	if action != gcos.ActionWrite && action != gcos.ActionRead {
		return s.gateRefused(w, r, gcos.Errorf(gcos.EINVALID, "action %s: want write or read", gcos.Quote(action)))
	}
	gq, err := parseGateQuery(q)
	if err != nil {
		return s.gateRefused(w, r, err)
	}
	res := s.gate.GateWith(r.Context(), object, action, gq.opt)
	if res.Refused != nil {
		return s.gateRefused(w, r, res.Refused) // a token the database never issued
	}
	s.m.observeGate(r, res.Decision, res.Source, time.Since(start))
	w.Header()["X-Gcos-Decision"] = hdrDecision[res.Decision]
	if gq.explain {
		return writeJSON(w, http.StatusOK, explained(res))
	}
	return writeJSON(w, http.StatusOK, res.Answer())
}

// GateBatchExplained is a batch's answer with explain=1: every decision in full (its Decisions are the ones
// encoded; the embedded lean ones are shadowed).
type GateBatchExplained struct {
	gcos.GateBatchAnswer
	Decisions []ExplainedGateResult `json:"decisions"`
}

// GateBatchRefusal is the answer to a batch the gate does not take (400, 413, 415): every check it could read
// blocked, and the error naming the problem.
type GateBatchRefusal struct {
	gcos.GateBatchAnswer
	Error ErrorDetail `json:"error"`
}

// gateBatch answers POST /v1/gate: {"checks": [{"object": "C:E", "action": "write"}, …]}, up to gate.batch_max,
// answered in request order from one instant. Over the limit or malformed is refused whole (never a partial allow).
func (s *server) gateBatch(w http.ResponseWriter, r *http.Request) int {
	start := time.Now()
	var batch gcos.GateBatch
	if err := s.decodeBody(r, &batch); err != nil {
		return s.gateBatchRefused(w, r, batch.Checks, err)
	}
	gq, err := parseGateQuery(r.URL.Query())
	if err == nil {
		err = gcos.CheckGateBatch(batch.Checks, s.store.Config().Gate.BatchMax)
	}
	if err != nil {
		return s.gateBatchRefused(w, r, batch.Checks, err)
	}
	res := s.gate.GateBatch(r.Context(), batch.Checks, gq.opt)
	if res.Refused != nil {
		return s.gateBatchRefused(w, r, batch.Checks, res.Refused)
	}
	took := time.Since(start)
	answers := res.Answers()
	out := gcos.NewGateBatchAnswer(answers)
	out.AsOf, out.Source, out.Token, out.Rescanned = res.AsOf, res.Source, res.Token, res.Rescanned
	s.m.observeGateBatch(r, out, took)
	w.Header()["X-Gcos-Decision"] = hdrDecision[out.Decision]
	if gq.explain {
		full := GateBatchExplained{GateBatchAnswer: out, Decisions: make([]ExplainedGateResult, len(res.Results))}
		for i, d := range res.Results {
			full.Decisions[i] = explained(d)
		}
		return writeJSON(w, http.StatusOK, full)
	}
	return writeJSON(w, http.StatusOK, out)
}

// gateBatchRefused answers a batch the gate does not take: each check it could read blocked, with the error.
func (s *server) gateBatchRefused(w http.ResponseWriter, r *http.Request, checks []gcos.GateCheck, err error) int {
	status, detail := s.errorAnswer(r, err)
	for i := range checks {
		checks[i].Object, checks[i].Action = gcos.EchoParam("object", checks[i].Object), gcos.EchoParam("action", checks[i].Action)
	}
	out := gcos.NewGateBatchAnswer(gcos.BlockAll(checks, detail.Message+"; the gate fails closed"))
	s.m.observeGateBatch(r, out, 0)
	w.Header()["X-Gcos-Decision"] = hdrDecision[gcos.GateBlock]
	return writeJSON(w, status, GateBatchRefusal{GateBatchAnswer: out, Error: detail})
}

// TokenAnswer is the body of GET /v1/token.
type TokenAnswer struct {
	Token string `json:"token"`
}

// token answers GET /v1/token (reader): a consistency token for the database's present. A writer outside GCOS (an
// exception granted in its registry) asks for one after its commit and passes it to the gate as at_least.
func (s *server) token(w http.ResponseWriter, r *http.Request) int {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	token, err := s.store.ConsistencyToken(ctx)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, TokenAnswer{Token: token})
}

// gateRefused answers a gate request whose input is bad: 400, a block, and the error.
func (s *server) gateRefused(w http.ResponseWriter, r *http.Request, err error) int {
	msg := gcos.ErrorMessage(err)
	s.m.observeGate(r, gcos.GateBlock, "", 0)
	w.Header()["X-Gcos-Decision"] = hdrDecision[gcos.GateBlock]
	q := r.URL.Query()
	return writeJSON(w, http.StatusBadRequest, GateRefusal{
		GateAnswer: gcos.GateAnswer{Object: gcos.EchoParam("object", q.Get("object")), Action: gcos.EchoParam("action", q.Get("action")),
			Decision: gcos.GateBlock, Reason: msg + "; the gate fails closed"},
		Error: ErrorDetail{Code: gcos.EINVALID, Message: msg},
	})
}

// reads is the gate a read-only route reads from (explain; the lists through its Store): over the replica while
// the replica is proven within gate.max_staleness of the primary, else over the primary. The X-GCOS-Source header
// says which.
func (s *server) reads(w http.ResponseWriter) *gate.Gate {
	st, source := s.gate.Reads()
	w.Header().Set("X-GCOS-Source", source)
	return st
}

// explain answers GET /v1/explain?object=C:E or ?group=KEY (exactly one).
func (s *server) explain(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	object, group := q.Get("object"), q.Get("group")
	ctx, cancel := s.requestContext(r)
	defer cancel()
	var ex gate.Explanation
	var err error
	switch {
	case (object == "") == (group == ""):
		return s.fail(w, r, gcos.Errorf(gcos.EINVALID, "give exactly one of object=COLLECTION:CODE or group=KEY"))
	case object != "":
		ex, err = s.reads(w).ExplainObject(ctx, object)
	default:
		ex, err = s.reads(w).ExplainGroup(ctx, group)
	}
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, ex)
}

// groups answers GET /v1/groups with filters and keyset pagination (after = the previous page's next).
func (s *server) groups(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	f := postgres.GroupFilter{Scope: q.Get("scope"), ObjectClass: q.Get("object_class"),
		SourceRegistry: q.Get("source_registry"), Verdict: q.Get("verdict"), After: q.Get("after")}
	if v := q.Get("dirty"); v != "" {
		d, err := strconv.ParseBool(v)
		if err != nil {
			return s.fail(w, r, gcos.Errorf(gcos.EINVALID, "dirty %s: want true or false", gcos.Quote(v)))
		}
		f.Dirty = &d
	}
	var err error
	if f.Limit, err = intParam(q, "limit", postgres.DefaultGroupLimit, postgres.MaxGroupLimit); err != nil {
		return s.fail(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	page, err := s.reads(w).Store().ListGroups(ctx, f)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, page)
}

// group answers GET /v1/groups/{key}.
func (s *server) group(w http.ResponseWriter, r *http.Request) int {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	g, err := s.reads(w).Store().GetGroup(ctx, r.PathValue("key"))
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, g)
}

// LedgerView is one scope's ledger with its check spelled out.
type LedgerView struct {
	gcos.Ledger
	Sum        int64 `json:"sum"`
	Difference int64 `json:"difference"`
	Closes     bool  `json:"closes"`
}

// InvariantView is the invariant answer.
type InvariantView struct {
	SnapshotID *int64       `json:"snapshot_id"`
	Closes     bool         `json:"closes"`
	Ledgers    []LedgerView `json:"ledgers"`
	// AsOf is when the ledger was computed: the API computes it at most once per http.read_cache_interval.
	AsOf *time.Time `json:"as_of,omitempty"`
}

// NewInvariantView spells out each ledger's sum, difference and whether it closes.
func NewInvariantView(rep gcos.LedgerReport) InvariantView {
	v := InvariantView{SnapshotID: rep.SnapshotID, Closes: rep.Closes, Ledgers: make([]LedgerView, 0, len(rep.Ledgers))}
	for _, l := range rep.Ledgers {
		v.Ledgers = append(v.Ledgers, LedgerView{Ledger: l, Sum: l.Sum(), Difference: l.Difference(), Closes: l.Closes()})
	}
	return v
}

// invariant answers GET /v1/invariant[?scope=S].
func (s *server) invariant(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	ctx, cancel := s.requestContext(r)
	defer cancel()
	scope := q.Get("scope")
	body, _, err := s.invariants.get(ctx, scope, s.computeInvariant(scope))
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeEncoded(w, http.StatusOK, body)
}

// computeInvariant reads one scope's ledger (every scope's for "") and encodes it, for the read cache.
func (s *server) computeInvariant(scope string) func(context.Context, time.Time) ([]byte, error) {
	return func(ctx context.Context, asOf time.Time) ([]byte, error) {
		rep, err := s.gate.Invariant(ctx, scope)
		if err != nil {
			return nil, err
		}
		v := NewInvariantView(rep)
		v.AsOf = &asOf
		return encodeJSON(v)
	}
}

// encodeJSON encodes v as writeJSON would.
func encodeJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode answer: %w", err)
	}
	return append(b, '\n'), nil
}

// invalidateReads drops the cached invariant and summary after a change made through this API.
func (s *server) invalidateReads() {
	s.invariants.invalidate()
	s.summaries.invalidate()
}

// SummaryView is the summary answer with the time it was computed (at most once per http.read_cache_interval).
type SummaryView struct {
	postgres.Summary
	AsOf time.Time `json:"as_of"`
}

// summary answers GET /v1/summary.
func (s *server) summary(w http.ResponseWriter, r *http.Request) int {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	body, _, err := s.summaries.get(ctx, "", func(ctx context.Context, asOf time.Time) ([]byte, error) {
		st, _ := s.gate.Reads() // computed once for every caller of the cache: no one response to mark
		sum, err := st.Store().Summary(ctx)
		if err != nil {
			return nil, err
		}
		return encodeJSON(SummaryView{Summary: sum, AsOf: asOf})
	})
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeEncoded(w, http.StatusOK, body)
}

// rulesets answers GET /v1/rulesets (newest first).
func (s *server) rulesets(w http.ResponseWriter, r *http.Request) int {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	list, err := s.reads(w).Store().ListRulesets(ctx)
	if err != nil {
		return s.fail(w, r, err)
	}
	if list == nil {
		list = []postgres.RulesetRow{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"rulesets": list})
}

// snapshots answers GET /v1/snapshots[?limit=N] (newest first).
func (s *server) snapshots(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", postgres.DefaultSnapshotLimit, postgres.MaxSnapshotLimit)
	if err != nil {
		return s.fail(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	list, err := s.reads(w).Store().ListSnapshots(ctx, limit)
	if err != nil {
		return s.fail(w, r, err)
	}
	if list == nil {
		list = []postgres.SnapshotInfo{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"snapshots": list})
}

// findings answers GET /v1/findings[?open=true&type=T&limit=N] (newest first).
func (s *server) findings(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	f := events.FindingFilter{IssueType: q.Get("type")}
	if v := q.Get("open"); v != "" {
		open, err := strconv.ParseBool(v)
		if err != nil {
			return s.fail(w, r, gcos.Errorf(gcos.EINVALID, "open %s: want true or false", gcos.Quote(v)))
		}
		f.OpenOnly = open
	}
	if f.IssueType != "" {
		if _, err := gcos.ParseIssueType(f.IssueType); err != nil {
			return s.fail(w, r, gcos.Errorf(gcos.EINVALID, "type %s: not a finding type (e.g. handoff_lag, input.invalid_schema)", gcos.Quote(f.IssueType)))
		}
	}
	var err error
	if f.Limit, err = intParam(q, "limit", postgres.DefaultFindingLimit, postgres.MaxFindingLimit); err != nil {
		return s.fail(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	list, err := s.events.ListFindings(ctx, f)
	if err != nil {
		return s.fail(w, r, err)
	}
	if list == nil {
		list = []events.FindingRow{}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"findings": list})
}

// changes answers GET /v1/changes (SPEC §13 feed), one of three ways:
//   - after=<cursor> (or start, or now): the changes after the cursor in commit order, a page of at most limit,
//     with next (the cursor to read on from) and more (the page was full: ask again at once);
//   - since=<RFC 3339 time>: the changes stamped after it and at or before as_of, oldest first; asked again with
//     since = the previous as_of, every change comes once;
//   - neither: the newest limit changes, newest first, with next: the cursor to follow every later one from.
func (s *server) changes(w http.ResponseWriter, r *http.Request) int {
	q := r.URL.Query()
	limit, err := intParam(q, "limit", postgres.DefaultChangeLimit, postgres.MaxChangeLimit)
	if err != nil {
		return s.fail(w, r, err)
	}
	cq := postgres.ChangeQuery{After: q.Get("after"), Limit: limit}
	if v := q.Get("since"); v != "" {
		if cq.Since, err = time.Parse(time.RFC3339Nano, v); err != nil {
			return s.fail(w, r, gcos.Errorf(gcos.EINVALID, "since %s: want an RFC 3339 time, e.g. 2026-11-26T08:00:00Z", gcos.Quote(v)))
		}
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	page, err := s.store.Changes(ctx, cq)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, page)
}

// watchChanges answers GET /v1/changes/watch: the verdict changes as Server-Sent Events, in commit order, from a
// cursor (the Last-Event-ID a reconnecting client sends, else after=, else now). Each event is one change,
// its id the cursor just past it, so a client that reconnects with Last-Event-ID receives every later change once.
// The stream reads the log every http.watch_poll and sends a comment at least every http.watch_heartbeat; it ends
// with the request (or, with an error event, when the log cannot be read).
func (s *server) watchChanges(w http.ResponseWriter, r *http.Request) int {
	// A reconnecting EventSource repeats its URL (after= included) and adds Last-Event-ID: the event id wins.
	after := cmp.Or(r.Header.Get("Last-Event-ID"), r.URL.Query().Get("after"), postgres.ChangesFromNow)
	if err := gcos.CheckParam("Last-Event-ID", after); err != nil {
		return s.fail(w, r, err)
	}
	read := func() (postgres.ChangePage, error) {
		ctx, cancel := s.requestContext(r)
		defer cancel()
		return s.store.Changes(ctx, postgres.ChangeQuery{After: after, Limit: postgres.MaxChangeLimit})
	}
	page, err := read() // a bad cursor is an answer of its own, before the stream starts
	if err != nil {
		return s.fail(w, r, err)
	}
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	send := func(text string) bool {
		// Each write has the server's write timeout, not the stream as a whole.
		_ = rc.SetWriteDeadline(time.Now().Add(s.limits.WriteTimeout.Duration()))
		if _, err := io.WriteString(w, text); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !send(": watching GCOS verdict changes\n\n") {
		return http.StatusOK
	}
	poll := time.NewTicker(s.limits.WatchPoll.Duration())
	defer poll.Stop()
	quiet := time.Now()
	for {
		for _, c := range page.Changes {
			body, err := json.Marshal(c)
			if err != nil {
				return http.StatusOK
			}
			if !send("id: " + page.CursorAfter(c) + "\nevent: change\ndata: " + string(body) + "\n\n") {
				return http.StatusOK
			}
			quiet = time.Now()
		}
		after = page.Next
		if !page.More {
			select {
			case <-r.Context().Done():
				return http.StatusOK
			case <-poll.C:
			}
		}
		if time.Since(quiet) >= s.limits.WatchHeartbeat.Duration() {
			if !send(": heartbeat\n\n") {
				return http.StatusOK
			}
			quiet = time.Now()
		}
		if page, err = read(); err != nil {
			if r.Context().Err() == nil {
				body, _ := json.Marshal(ErrorDetail{Code: gcos.ErrorCode(err), Message: gcos.ErrorMessage(err)})
				send("event: error\ndata: " + string(body) + "\n\n")
			}
			return http.StatusOK
		}
	}
}

// workers answers GET /v1/workers.
func (s *server) workers(w http.ResponseWriter, r *http.Request) int {
	ctx, cancel := s.requestContext(r)
	defer cancel()
	rep, err := s.store.Workers(ctx)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, rep)
}

// ActivateRequest is the body of POST /v1/rulesets/{version}/activate.
type ActivateRequest struct {
	ApprovalRef string `json:"approval_ref"`
	// Actor is the name the approver gives, recorded as said; who approves is the token's principal.
	Actor string `json:"actor,omitempty"`
}

// activate answers POST /v1/rulesets/{version}/activate (approver). Self-approval, decided on the token's principal
// (and the name given), is 409.
func (s *server) activate(w http.ResponseWriter, r *http.Request) int {
	version := r.PathValue("version")
	if err := gcos.CheckRulesetVersion(version); err != nil {
		return s.fail(w, r, err)
	}
	var req ActivateRequest
	if err := s.decodeBody(r, &req); err != nil {
		return s.failRequest(w, r, err)
	}
	req.ApprovalRef, req.Actor = strings.TrimSpace(req.ApprovalRef), strings.TrimSpace(req.Actor)
	if err := textField("approval_ref", req.ApprovalRef); err != nil {
		return s.fail(w, r, err)
	}
	if err := optionalText("actor", req.Actor); err != nil {
		return s.fail(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	by := actor(r, req.Actor)
	res, err := s.store.ActivateRulesetAs(ctx, version, req.ApprovalRef, by)
	if err != nil {
		return s.fail(w, r, err)
	}
	s.invalidateReads()
	s.logger.Info("ruleset activated over HTTP", "ruleset_version", version, "principal", by.Principal, "name", by.Name, "approval_ref", req.ApprovalRef)
	return writeJSON(w, http.StatusOK, res)
}

// ResetRequest is the body of POST /v1/cursors/{source}/reset.
type ResetRequest struct {
	To string `json:"to"` // a watermark: "start", "<timestamp>" or "<timestamp>/<id>"
}

var sourcePattern = regexp.MustCompile(`^[a-z][a-z0-9_.]{0,127}$`)

// resetCursor answers POST /v1/cursors/{source}/reset (operator): replay from a watermark.
func (s *server) resetCursor(w http.ResponseWriter, r *http.Request) int {
	source := r.PathValue("source")
	if !sourcePattern.MatchString(source) {
		return s.fail(w, r, gcos.Errorf(gcos.EINVALID, "source %s: not a cursor source name", gcos.Quote(source)))
	}
	var req ResetRequest
	if err := s.decodeBody(r, &req); err != nil {
		return s.failRequest(w, r, err)
	}
	if strings.TrimSpace(req.To) == "" {
		return s.fail(w, r, gcos.Errorf(gcos.EINVALID, `to: a watermark is required ("start", "<timestamp>" or "<timestamp>/<id>")`))
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	by := actor(r, "")
	cur, err := s.intake.ResetCursorAs(ctx, source, req.To, by)
	if err != nil {
		return s.fail(w, r, err)
	}
	s.invalidateReads()
	s.logger.Info("cursor reset over HTTP", "source", source, "to", req.To, "principal", by.Principal)
	return writeJSON(w, http.StatusOK, cur)
}

// metrics answers GET /metrics (reader): Prometheus exposition of the explicit registry.
func (s *server) metrics(w http.ResponseWriter, r *http.Request) int {
	s.m.handler.ServeHTTP(w, r)
	return http.StatusOK
}

// healthz answers GET /healthz: the process is up. It does not touch the database.
func (s *server) healthz(w http.ResponseWriter, _ *http.Request) int {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "version": s.version})
}

// Readiness is the /readyz answer: each check's state ("ok" or why not).
type Readiness struct {
	Status string            `json:"status"` // ready or unavailable
	Checks map[string]string `json:"checks"`
}

// readyz answers GET /readyz: 200 while every check holds (the database answers, the gate can give answers other
// than block, and whatever the daemon added, its intake), else 503 naming what does not. The checks share a second.
func (s *server) readyz(w http.ResponseWriter, r *http.Request) int {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	res := Readiness{Status: "ready", Checks: make(map[string]string, len(s.ready))}
	for _, c := range s.ready {
		res.Checks[c.Name] = "ok"
		if err := c.Check(ctx); err != nil {
			res.Status, res.Checks[c.Name] = "unavailable", gcos.ErrorMessage(err)
		}
	}
	if res.Status != "ready" {
		return writeJSON(w, http.StatusServiceUnavailable, res)
	}
	return writeJSON(w, http.StatusOK, res)
}

// intParam reads an optional integer parameter in 1..max (absent: def); anything else is refused, never capped.
func intParam(q url.Values, name string, def, max int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, gcos.Errorf(gcos.EINVALID, "%s %s: want an integer in 1..%d", name, gcos.Quote(v), max)
	}
	return n, nil
}

// optionalText is textField for a value that may be absent.
func optionalText(name, v string) error {
	if v == "" {
		return nil
	}
	return textField(name, v)
}

// textField requires a short, printable, non-empty value.
func textField(name, v string) error {
	switch {
	case v == "":
		return gcos.Errorf(gcos.EINVALID, "%s is required", name)
	case len(v) > 200:
		return gcos.Errorf(gcos.EINVALID, "%s is longer than 200 bytes", name)
	case strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return gcos.Errorf(gcos.EINVALID, "%s contains control characters", name)
	}
	return nil
}
