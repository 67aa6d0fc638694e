package httpapi

import (
	"context"
	"net/http"
	"strings"

	"gcos"
	"gcos/events"
	"gcos/postgres"
)

// The loop a person works over HTTP: who am I, propose a ruleset, show and resolve a finding, list and read
// notifications, mute and unmute them. Every mutation acts as the token's principal; a name in the body is
// recorded as said, never trusted.

// Me is the answer of GET /v1/me: the caller as GCOS sees it, and its unread count.
type Me struct {
	Principal  string   `json:"principal"`
	Roles      []string `json:"roles"`
	Local      bool     `json:"local"` // the daemon's run token (the CLI beside it) or --insecure-no-auth
	Unread     int      `json:"unread"`
	UnreadMore bool     `json:"unread_more"`
}

// me answers GET /v1/me (reader): the dashboard shows the caller's unread count from it.
func (s *server) me(w http.ResponseWriter, r *http.Request) int {
	c := callerOf(r)
	ctx, cancel := s.requestContext(r)
	defer cancel()
	n, more, err := s.events.UnreadCount(ctx, c.Principal)
	if err != nil {
		return s.fail(w, r, err)
	}
	roles := c.Roles
	if roles == nil {
		roles = []string{}
	}
	return writeJSON(w, http.StatusOK, Me{Principal: c.Principal, Roles: roles, Local: c.Local, Unread: n, UnreadMore: more})
}

// ProposeRequest is the body of POST /v1/rulesets.
type ProposeRequest struct {
	// Proposer is the name the proposer gives, recorded as said; who proposes is the token's principal.
	Proposer string `json:"proposer,omitempty"`
}

// ProposeResult is the answer of POST /v1/rulesets.
type ProposeResult struct {
	Ruleset postgres.RulesetRow `json:"ruleset"`
	Created bool                `json:"created"` // false: the registries hash to a version already recorded
}

// propose answers POST /v1/rulesets (operator): compute the ruleset from the current registries and record it as
// a draft proposed by the caller's principal.
func (s *server) propose(w http.ResponseWriter, r *http.Request) int {
	var req ProposeRequest
	if err := s.decodeBody(r, &req); err != nil {
		return s.failRequest(w, r, err)
	}
	req.Proposer = strings.TrimSpace(req.Proposer)
	if err := optionalText("proposer", req.Proposer); err != nil {
		return s.fail(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	row, created, err := s.store.ComputeRulesetAs(ctx, actor(r, req.Proposer), s.previews.RulesetImpact)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, ProposeResult{Ruleset: row, Created: created})
}

// finding answers GET /v1/findings/{id} (reader).
func (s *server) finding(w http.ResponseWriter, r *http.Request) int {
	id, err := events.CheckFindingID(r.PathValue("id"))
	if err != nil {
		return s.fail(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	d, err := s.events.GetFinding(ctx, id)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, d)
}

// ResolveRequest is the body of POST /v1/findings/{id}/resolve.
type ResolveRequest struct {
	Reason string `json:"reason"`
}

// resolveFinding answers POST /v1/findings/{id}/resolve (operator): close an open finding with a reason.
func (s *server) resolveFinding(w http.ResponseWriter, r *http.Request) int {
	id, err := events.CheckFindingID(r.PathValue("id"))
	if err != nil {
		return s.fail(w, r, err)
	}
	var req ResolveRequest
	if err := s.decodeBody(r, &req); err != nil {
		return s.failRequest(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	by := actor(r, "")
	row, err := s.events.ResolveFindingAs(ctx, id, req.Reason, by)
	if err != nil {
		return s.fail(w, r, err)
	}
	s.invalidateReads()
	s.logger.Info("finding resolved over HTTP", "finding", id, "principal", by.Principal)
	return writeJSON(w, http.StatusOK, row)
}

// notifications answers GET /v1/notifications (reader): the caller's unread notifications, unread count and
// subscriptions. An operator may read another recipient's (a team's, GOV-COUNCIL) with recipient=.
func (s *server) notifications(w http.ResponseWriter, r *http.Request) int {
	c := callerOf(r)
	q := r.URL.Query()
	recipient := c.Principal
	if v := q.Get("recipient"); v != "" && v != c.Principal {
		if !c.holds(gcos.RoleOperator) {
			return s.fail(w, r, gcos.Errorf(gcos.EFORBIDDEN, "reading %s's notifications needs an operator token", v))
		}
		recipient = v
	}
	limit, err := intParam(q, "limit", 100, 1000)
	if err != nil {
		return s.fail(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	in, err := s.events.Inbox(ctx, recipient, limit)
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, in)
}

// ReadRequest is the body of POST /v1/notifications/read: the events to mark read, or all.
type ReadRequest struct {
	EventIDs []string `json:"event_ids,omitempty"`
	All      bool     `json:"all,omitempty"`
}

// readNotifications answers POST /v1/notifications/read (reader): the caller has seen these.
func (s *server) readNotifications(w http.ResponseWriter, r *http.Request) int {
	var req ReadRequest
	if err := s.decodeBody(r, &req); err != nil {
		return s.failRequest(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := s.events.MarkReadAs(ctx, req.EventIDs, req.All, actor(r, ""))
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, res)
}

// muteNotifications answers POST /v1/notifications/mute (operator).
func (s *server) muteNotifications(w http.ResponseWriter, r *http.Request) int {
	return s.changeSubscription(w, r, s.events.MuteAs)
}

// unmuteNotifications answers POST /v1/notifications/unmute (operator).
func (s *server) unmuteNotifications(w http.ResponseWriter, r *http.Request) int {
	return s.changeSubscription(w, r, s.events.UnmuteAs)
}

// subscribeNotifications answers POST /v1/notifications/subscribe (operator).
func (s *server) subscribeNotifications(w http.ResponseWriter, r *http.Request) int {
	return s.changeSubscription(w, r, s.events.SubscribeAs)
}

func (s *server) changeSubscription(w http.ResponseWriter, r *http.Request,
	change func(ctx context.Context, sel events.NotificationSelector, by gcos.Actor) (events.SubscriptionChange, error)) int {
	var sel events.NotificationSelector
	if err := s.decodeBody(r, &sel); err != nil {
		return s.failRequest(w, r, err)
	}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	res, err := change(ctx, sel, actor(r, ""))
	if err != nil {
		return s.fail(w, r, err)
	}
	return writeJSON(w, http.StatusOK, res)
}
