package gcos

import (
	"fmt"
	"slices"
	"strings"
)

// Actor is who did something, as GCOS records it. Principal is the identity rules are checked against (no
// self-approval, roles): over HTTP the principal of the bearer token; on the CLI, which holds the database
// credential itself, the --by name. Name is the name the caller gave (--by, a body field), recorded as said;
// OSUser is the operating-system user the CLI ran as; Via is the channel (http, cli, daemon).
type Actor struct {
	Principal string `json:"principal"`
	Name      string `json:"name,omitempty"`
	OSUser    string `json:"os_user,omitempty"`
	Via       string `json:"via,omitempty"`
}

// Actor channels.
const (
	ViaHTTP   = "http"
	ViaCLI    = "cli"
	ViaDaemon = "daemon"
)

// NamedActor is the actor of a caller known only by a name (the daemon's own steps, tests, the CLI's --by): the
// name is the principal.
func NamedActor(name, via string) Actor { return Actor{Principal: name, Name: name, Via: via} }

// Audit is the actor as an audit row's detail names it.
func (a Actor) Audit() map[string]any {
	m := map[string]any{"principal": a.Principal}
	if a.Name != "" && a.Name != a.Principal {
		m["name"] = a.Name
	}
	if a.OSUser != "" {
		m["os_user"] = a.OSUser
	}
	if a.Via != "" {
		m["via"] = a.Via
	}
	return m
}

// Check refuses an actor without a principal, or one that names it with surrounding spaces or control characters.
func (a Actor) Check(what string) error {
	if strings.TrimSpace(a.Principal) == "" {
		return Errorf(EINVALID, "%s: the acting principal is required (--by)", what)
	}
	if err := CheckParam("principal", a.Principal); err != nil {
		return err
	}
	return nil
}

// FindPrincipal returns the configured principal named name.
func FindPrincipal(principals []Principal, name string) (Principal, bool) {
	i := slices.IndexFunc(principals, func(p Principal) bool { return p.Name == name })
	if i < 0 {
		return Principal{}, false
	}
	return principals[i], true
}

// Holds reports whether the principal holds role.
func (p Principal) Holds(role string) bool { return slices.Contains(p.Roles, role) }

// MayAct decides whether principal may act in role. With no principals configured, names are not checked (GCOS
// says so at start) and anyone may; otherwise the principal must be configured and hold the role. An approver
// need not also be an operator: approving is its own duty.
func MayAct(principals []Principal, principal, role string) error {
	if len(principals) == 0 {
		return nil
	}
	p, ok := FindPrincipal(principals, principal)
	switch {
	case !ok:
		return Errorf(EFORBIDDEN, "%s is not a configured principal (principals in the configuration)", Quote(principal))
	case !p.Holds(role) && !(role == RoleReader && len(p.Roles) > 0):
		return Errorf(EFORBIDDEN, "principal %s does not hold the %s role", Quote(principal), role)
	}
	return nil
}

// SelfApproval reports why approver may not approve what proposer proposed: the same principal, or the same
// name under two principals. Empty when the approval stands.
func SelfApproval(proposer, approver Actor) string {
	switch {
	case proposer.Principal != "" && proposer.Principal == approver.Principal:
		return fmt.Sprintf("principal %s proposed this ruleset and cannot approve it (no self-approval)", approver.Principal)
	case proposer.Name != "" && proposer.Name == approver.Name:
		return fmt.Sprintf("%s proposed this ruleset and cannot approve it (no self-approval)", approver.Name)
	}
	return ""
}
