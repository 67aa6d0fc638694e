package gcos

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// OpenID AuthZEN Authorization API 1.0 (SPEC §13): the standard's request and answer shapes, and the pure mapping of
// an evaluation onto a gate question. A resource is an object (type = collection, id = entity code), action.name
// names a gate action through gate.authzen_actions, and the subject is recorded: the bearer token's principal, not
// the subject, decides who may ask. A deny is an answer ({"decision": false}); only a request the standard's shape
// does not describe is refused (400).

// AuthZENEntity is a subject or a resource: {type, id, properties}.
type AuthZENEntity struct {
	Type       string         `json:"type"`
	ID         string         `json:"id"`
	Properties map[string]any `json:"properties,omitempty"`
}

// AuthZENAction is the action asked about: {name, properties}.
type AuthZENAction struct {
	Name       string         `json:"name"`
	Properties map[string]any `json:"properties,omitempty"`
}

// AuthZENEvaluation is one access evaluation request: who (recorded), what action, on which object, in what context.
type AuthZENEvaluation struct {
	Subject  *AuthZENEntity `json:"subject,omitempty"`
	Action   *AuthZENAction `json:"action,omitempty"`
	Resource *AuthZENEntity `json:"resource,omitempty"`
	Context  map[string]any `json:"context,omitempty"`
}

// AuthZENOptions is how a request asks to be executed: the standard's evaluations_semantic, and GCOS's own keys
// (the standard leaves options open): explain puts the gate's reason and state into each answer's context, and
// consistency / at_least are the gate's freshness demands (SPEC §12).
type AuthZENOptions struct {
	EvaluationsSemantic string `json:"evaluations_semantic,omitempty"`
	Explain             bool   `json:"explain,omitempty"`
	Consistency         string `json:"consistency,omitempty"`
	AtLeast             string `json:"at_least,omitempty"`
}

// AuthZENRequest is the body of POST /access/v1/evaluation and /access/v1/evaluations: for the latter the top-level
// subject, action, resource and context are the defaults of each item of Evaluations.
type AuthZENRequest struct {
	AuthZENEvaluation
	Evaluations []AuthZENEvaluation `json:"evaluations,omitempty"`
	Options     *AuthZENOptions     `json:"options,omitempty"`
}

// The standard's evaluations semantics.
const (
	AuthZENExecuteAll          = "execute_all"
	AuthZENDenyOnFirstDeny     = "deny_on_first_deny"
	AuthZENPermitOnFirstPermit = "permit_on_first_permit"
)

// AuthZENSemantics are the evaluations semantics GCOS answers.
var AuthZENSemantics = []string{AuthZENExecuteAll, AuthZENDenyOnFirstDeny, AuthZENPermitOnFirstPermit}

// AuthZENItem is one evaluation resolved for the gate: the check it asks, or why it is decided without the gate.
type AuthZENItem struct {
	Subject AuthZENEntity
	Check   GateCheck
	// Deny is set when the item is a deny the gate need not be asked for (an action the gate does not answer).
	Deny string
	// Err is set when the item cannot be evaluated (a required field missing or malformed): a deny with
	// context.error in a batch, 400 for a single evaluation.
	Err error
}

// Options are the request's options (the zero value when it gave none).
func (r AuthZENRequest) Opts() AuthZENOptions {
	if r.Options == nil {
		return AuthZENOptions{}
	}
	return *r.Options
}

// Semantic is the request's evaluations semantic, checked: execute_all when it names none.
func (o AuthZENOptions) Semantic() (string, error) {
	switch s := o.EvaluationsSemantic; {
	case s == "":
		return AuthZENExecuteAll, nil
	case slices.Contains(AuthZENSemantics, s):
		return s, nil
	default:
		return "", Errorf(EINVALID, "options.evaluations_semantic %s: want one of %s", quoteInput(s), strings.Join(AuthZENSemantics, ", "))
	}
}

// Resolve checks one evaluation and maps it onto a gate check: resource {type: collection, id: entity code} is the
// object COLLECTION:CODE, action.name is a gate action through actions (gate.authzen_actions).
func (e AuthZENEvaluation) Resolve(actions map[string]string) AuthZENItem {
	var it AuthZENItem
	switch {
	case e.Subject == nil || e.Subject.Type == "" || e.Subject.ID == "":
		it.Err = Errorf(EINVALID, "subject: type and id are required")
	case e.Action == nil || e.Action.Name == "":
		it.Err = Errorf(EINVALID, "action: name is required")
	case e.Resource == nil || e.Resource.Type == "" || e.Resource.ID == "":
		it.Err = Errorf(EINVALID, "resource: type (the collection) and id (the entity code) are required")
	}
	if it.Err != nil {
		return it
	}
	it.Subject = AuthZENEntity{Type: e.Subject.Type, ID: e.Subject.ID}
	for _, f := range []struct{ name, value string }{
		{"subject.type", e.Subject.Type}, {"subject.id", e.Subject.ID}, {"action.name", e.Action.Name},
		{"resource.type", e.Resource.Type}, {"resource.id", e.Resource.ID},
	} {
		if err := CheckParam(f.name, f.value); err != nil {
			it.Err = err
			return it
		}
	}
	if strings.Contains(e.Resource.Type, ":") {
		it.Err = Errorf(EINVALID, "resource.type %s: a collection name has no colon", quoteInput(e.Resource.Type))
		return it
	}
	it.Check.Object = e.Resource.Type + ":" + e.Resource.ID
	action, ok := actions[e.Action.Name]
	if !ok {
		it.Check.Action = ActionWrite
		it.Deny = fmt.Sprintf("action %s is not one the gate answers (gate.authzen_actions: %s)", quoteInput(e.Action.Name), strings.Join(slices.Sorted(maps.Keys(actions)), ", "))
		return it
	}
	it.Check.Action = action
	return it
}

// Items resolves an evaluations request: each item of Evaluations with the top-level fields as its defaults, at
// most max of them. With no items the request is the single evaluation its top-level fields name (the standard's
// backwards-compatible reading), and a request that names neither is refused.
func (r AuthZENRequest) Items(max int, actions map[string]string) ([]AuthZENItem, error) {
	if len(r.Evaluations) == 0 {
		if r.Subject == nil && r.Action == nil && r.Resource == nil {
			return nil, Errorf(EINVALID, "evaluations is empty and the request names no subject, action and resource; want 1 to %d evaluations", max)
		}
		it := r.AuthZENEvaluation.Resolve(actions)
		if it.Err != nil {
			return nil, it.Err
		}
		return []AuthZENItem{it}, nil
	}
	if len(r.Evaluations) > max {
		return nil, Errorf(EINVALID, "evaluations has %d items, more than the limit of %d (gate.batch_max); split it", len(r.Evaluations), max)
	}
	out := make([]AuthZENItem, len(r.Evaluations))
	for i, e := range r.Evaluations {
		if e.Subject == nil {
			e.Subject = r.Subject
		}
		if e.Action == nil {
			e.Action = r.Action
		}
		if e.Resource == nil {
			e.Resource = r.Resource
		}
		if e.Context == nil {
			e.Context = r.Context
		}
		out[i] = e.Resolve(actions)
		if out[i].Err != nil {
			out[i].Err = Errorf(EINVALID, "evaluations[%d]: %s", i, ErrorMessage(out[i].Err))
		}
	}
	return out, nil
}

// AuthZENSearchRequest is the body of POST /access/v1/search/resource: the resources of resource.type (a
// collection) the action may be done on; resource.id is ignored, as the standard asks.
type AuthZENSearchRequest struct {
	AuthZENEvaluation
	Page    *AuthZENPageRequest `json:"page,omitempty"`
	Options *AuthZENOptions     `json:"options,omitempty"`
}

// AuthZENPageRequest asks for a page: the previous page's next_token, and at most limit results.
type AuthZENPageRequest struct {
	Token string `json:"token,omitempty"`
	Limit *int   `json:"limit,omitempty"`
}

// AuthZENSearchDefaultLimit is a search page's size when the request names none.
const AuthZENSearchDefaultLimit = 100

// Resolve checks a search request: subject, action and resource.type are required (resource.id is not), the
// action maps as an evaluation's does (an action the gate does not answer finds nothing), and the page size is
// 1 to max (AuthZENSearchDefaultLimit, at most max, when absent or 0).
func (r AuthZENSearchRequest) Resolve(max int, actions map[string]string) (it AuthZENItem, limit int, token string) {
	e := r.AuthZENEvaluation
	if e.Resource != nil {
		res := *e.Resource
		res.ID = "*" // ignored, as the standard asks; any id passes the shared checks
		e.Resource = &res
	}
	it = e.Resolve(actions)
	limit = min(AuthZENSearchDefaultLimit, max)
	if r.Page != nil {
		token = r.Page.Token
		if l := r.Page.Limit; l != nil && *l != 0 {
			limit = *l
		}
	}
	if it.Err == nil && (limit < 1 || limit > max) {
		it.Err = Errorf(EINVALID, "page.limit %d: want 1 to %d (gate.batch_max)", limit, max)
	}
	if it.Err == nil {
		if err := CheckParam("page.token", token); err != nil {
			it.Err = err
		}
	}
	return it, limit, token
}

// AuthZENSearchAnswer is a search page: the standard's page (next_token "" at the end; count on this page) and
// results, and with options.explain the instant every page of the search is read from.
type AuthZENSearchAnswer struct {
	Page    AuthZENPage     `json:"page"`
	Context *AuthZENContext `json:"context,omitempty"`
	Results []AuthZENEntity `json:"results"`
}

// AuthZENPage is a search answer's page.
type AuthZENPage struct {
	NextToken string `json:"next_token"`
	Count     int    `json:"count"`
}

// AuthZENDecision is one answer: the decision, and a context only when there is something the caller must or asked
// to know (an error; the short-circuit that stopped a batch; the gate's reason and state with options.explain).
type AuthZENDecision struct {
	Decision bool            `json:"decision"`
	Context  *AuthZENContext `json:"context,omitempty"`
}

// AuthZENContext is an answer's context. Code and Reason on the item a short-circuit semantic stopped at are the
// standard's ("200", the semantic); Error is the standard's per-item error; the rest is GCOS's explanation.
type AuthZENContext struct {
	Code       string         `json:"code,omitempty"`
	Reason     string         `json:"reason,omitempty"`
	GateReason string         `json:"gate_reason,omitempty"` // the gate's reason, on a stopping item with explain
	Error      *AuthZENError  `json:"error,omitempty"`
	Object     string         `json:"object,omitempty"`
	Action     string         `json:"action,omitempty"`
	Subject    *AuthZENEntity `json:"subject,omitempty"`
	AsOf       time.Time      `json:"as_of,omitzero"`
	Source     string         `json:"source,omitempty"`
	Token      string         `json:"token,omitempty"`
	Rescanned  bool           `json:"rescanned,omitempty"`
}

// AuthZENError is a per-item error: the HTTP status the item would have had alone, and why.
type AuthZENError struct {
	Status  int    `json:"status"`
	Message string `json:"message"`
}

// AuthZENEvaluationsAnswer is the body of an evaluations answer.
type AuthZENEvaluationsAnswer struct {
	Evaluations []AuthZENDecision `json:"evaluations"`
}

// Decide turns the gate's answer to an item into the standard's: allow is true, anything else false. An item that
// could not be evaluated is false with context.error whatever the caller asked; with explain the context carries the
// gate's reason, the object and action asked, the subject, and the state read.
func (it AuthZENItem) Decide(a GateAnswer, explain bool) AuthZENDecision {
	if it.Err != nil {
		return AuthZENDecision{Context: &AuthZENContext{Error: &AuthZENError{Status: 400, Message: ErrorMessage(it.Err)}}}
	}
	d := AuthZENDecision{Decision: it.Deny == "" && a.Allowed()}
	if explain {
		reason := a.Reason
		if it.Deny != "" {
			reason = it.Deny
		}
		subject := it.Subject
		d.Context = &AuthZENContext{Reason: reason, Object: it.Check.Object, Action: it.Check.Action, Subject: &subject,
			AsOf: a.AsOf, Source: a.Source, Token: a.Token, Rescanned: a.Rescanned}
	}
	return d
}

// ShortCircuit applies an evaluations semantic to answers taken in request order: execute_all returns them all;
// deny_on_first_deny stops at the first deny and permit_on_first_permit at the first permit. The deny that stops a
// batch carries the standard's context {"code": "200", "reason": "deny_on_first_deny"}; a permit that stops it is
// the standard's plain {"decision": true} (a caller MAY reject a permit whose context it does not understand), with
// the reason only when the caller asked to explain.
func ShortCircuit(semantic string, ds []AuthZENDecision, explain bool) []AuthZENDecision {
	var stopOn bool
	switch semantic {
	case AuthZENDenyOnFirstDeny:
		stopOn = false
	case AuthZENPermitOnFirstPermit:
		stopOn = true
	default:
		return ds
	}
	i := slices.IndexFunc(ds, func(d AuthZENDecision) bool { return d.Decision == stopOn })
	if i < 0 {
		return ds
	}
	ds = ds[:i+1]
	if !stopOn || explain {
		c := AuthZENContext{}
		if ds[i].Context != nil {
			c = *ds[i].Context
		}
		c.GateReason, c.Code, c.Reason = c.Reason, "200", semantic
		ds[i].Context = &c
	}
	return ds
}

// AuthZENMetadata is the PDP's metadata document (GET /.well-known/authzen-configuration).
type AuthZENMetadata struct {
	PolicyDecisionPoint       string `json:"policy_decision_point"`
	AccessEvaluationEndpoint  string `json:"access_evaluation_endpoint"`
	AccessEvaluationsEndpoint string `json:"access_evaluations_endpoint"`
	SearchResourceEndpoint    string `json:"search_resource_endpoint"`
}

// The AuthZEN endpoints' paths (the standard's defaults).
const (
	AuthZENEvaluationPath     = "/access/v1/evaluation"
	AuthZENEvaluationsPath    = "/access/v1/evaluations"
	AuthZENSearchResourcePath = "/access/v1/search/resource"
	AuthZENMetadataPath       = "/.well-known/authzen-configuration"
)

// NewAuthZENMetadata is the metadata of the PDP at base (scheme://host, the URL the document was fetched from
// without the well-known path).
func NewAuthZENMetadata(base string) AuthZENMetadata {
	return AuthZENMetadata{PolicyDecisionPoint: base, AccessEvaluationEndpoint: base + AuthZENEvaluationPath,
		AccessEvaluationsEndpoint: base + AuthZENEvaluationsPath, SearchResourceEndpoint: base + AuthZENSearchResourcePath}
}

// quoteInput quotes a value a caller sent for an error message: control characters escaped, long values shortened.
func quoteInput(s string) string {
	const max = 80
	if r := []rune(s); len(r) > max {
		return fmt.Sprintf("%q…", string(r[:max]))
	}
	return fmt.Sprintf("%q", s)
}
