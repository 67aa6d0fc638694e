package gcos

import (
	"strings"
	"time"
)

// The gate's answers as a pipeline receives them (SPEC §12, §13): a lean answer per question, and a batch answered
// from one instant. The full statement (every consulted row) stays behind explain.

// GateCheck is one question: may this action proceed on this object? An empty action is a write.
type GateCheck struct {
	Object string `json:"object"`
	Action string `json:"action,omitempty"`
}

// GateAnswer is the gate's lean answer to one question: the decision, the reason that decided it, and the state it
// was read from (when, from where, and a consistency token a later question may demand as at_least). In a batch the
// state is the batch's and the per-answer fields are left out.
type GateAnswer struct {
	Object          string    `json:"object"`
	Action          string    `json:"action"`
	Decision        string    `json:"decision"`
	Reason          string    `json:"reason"`
	AsOf            time.Time `json:"as_of,omitzero"`
	Source          string    `json:"source,omitempty"`
	Token           string    `json:"token,omitempty"`
	RescanScheduled bool      `json:"rescan_scheduled,omitempty"`
	Rescanned       bool      `json:"rescanned,omitempty"`
}

// Allowed reports whether the answer allows its action.
func (a GateAnswer) Allowed() bool { return a.Decision == GateAllow }

// GateBatch is a batch question: up to gate.batch_max checks, answered in order from one instant.
type GateBatch struct {
	Checks []GateCheck `json:"checks"`
}

// GateBatchAnswer answers a batch: one decision per check, in request order, all read from the state named by
// AsOf, Source and Token. Decision is allow only when every check is allowed.
type GateBatchAnswer struct {
	Decision  string       `json:"decision"`
	Allowed   int          `json:"allowed"`
	Blocked   int          `json:"blocked"`
	AsOf      time.Time    `json:"as_of,omitzero"`
	Source    string       `json:"source,omitempty"`
	Token     string       `json:"token,omitempty"`
	Rescanned bool         `json:"rescanned,omitempty"`
	Decisions []GateAnswer `json:"decisions"`
}

// NewGateBatchAnswer counts a batch's answers and takes its decision: allow only when there is at least one answer
// and every answer allows.
func NewGateBatchAnswer(answers []GateAnswer) GateBatchAnswer {
	b := GateBatchAnswer{Decision: GateBlock, Decisions: answers}
	for _, a := range answers {
		if a.Allowed() {
			b.Allowed++
		} else {
			b.Blocked++
		}
	}
	if len(answers) > 0 && b.Blocked == 0 {
		b.Decision = GateAllow
	}
	return b
}

// BlockAll answers every check with a block for reason: what a batch that cannot be decided gets (never a
// partial allow).
func BlockAll(checks []GateCheck, reason string) []GateAnswer {
	out := make([]GateAnswer, len(checks))
	for i, c := range checks {
		out[i] = GateAnswer{Object: c.Object, Action: c.Action, Decision: GateBlock, Reason: reason}
		if out[i].Action == "" {
			out[i].Action = ActionWrite
		}
	}
	return out
}

// CheckObjectRef refuses what is not an object reference, COLLECTION:CODE.
func CheckObjectRef(s string) error {
	if err := CheckParam("object", s); err != nil {
		return err
	}
	coll, code, ok := strings.Cut(s, ":")
	if !ok || coll == "" || code == "" {
		return Errorf(EINVALID, "object %s: want COLLECTION:CODE", Quote(s))
	}
	return nil
}

// CheckGateBatch refuses a batch the gate does not answer: no checks, more than max, or a check whose object or
// action is malformed. The error names the first bad check by its index, so the caller can fix its input; the
// batch is then refused whole.
func CheckGateBatch(checks []GateCheck, max int) error {
	switch {
	case len(checks) == 0:
		return Errorf(EINVALID, "the batch has no checks; want 1 to %d", max)
	case len(checks) > max:
		return Errorf(EINVALID, "the batch has %d checks, more than the limit of %d; split it", len(checks), max)
	}
	for i, c := range checks {
		if err := CheckObjectRef(c.Object); err != nil {
			return Errorf(EINVALID, "checks[%d]: %s", i, ErrorMessage(err))
		}
		if c.Action != "" && c.Action != ActionWrite && c.Action != ActionRead {
			return Errorf(EINVALID, "checks[%d]: action %s: want write or read", i, Quote(c.Action))
		}
	}
	return nil
}
