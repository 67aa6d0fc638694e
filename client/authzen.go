package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"

	"gcos"
)

// The gate as OpenID AuthZEN 1.0 (SPEC §13): for a caller that already speaks the standard. A question the client
// could not get answered is a deny with the error, as Gate's block is.

// Evaluate asks POST /access/v1/evaluation. The answer is the decision, false with err when there is none.
func (c *Client) Evaluate(ctx context.Context, e gcos.AuthZENEvaluation, opts *gcos.AuthZENOptions) (gcos.AuthZENDecision, error) {
	body, err := json.Marshal(gcos.AuthZENRequest{AuthZENEvaluation: e, Options: opts})
	if err != nil {
		return gcos.AuthZENDecision{}, fmt.Errorf("encode the evaluation: %w", err)
	}
	var got struct {
		Decision *bool                `json:"decision"`
		Context  *gcos.AuthZENContext `json:"context"`
	}
	if err := c.do(ctx, http.MethodPost, c.base.JoinPath(gcos.AuthZENEvaluationPath), nil, body, &got, maxAnswerBytes, c.tries); err != nil {
		return gcos.AuthZENDecision{}, err
	}
	if got.Decision == nil {
		return gcos.AuthZENDecision{}, fmt.Errorf("%w: the answer has no decision", ErrMalformed)
	}
	return gcos.AuthZENDecision{Decision: *got.Decision, Context: got.Context}, nil
}

// Evaluations asks POST /access/v1/evaluations with req (its evaluations non-empty). The answers are in request
// order, cut short as req's semantic says; on error every answer is a deny.
func (c *Client) Evaluations(ctx context.Context, req gcos.AuthZENRequest) ([]gcos.AuthZENDecision, error) {
	fail := func(err error) ([]gcos.AuthZENDecision, error) {
		return make([]gcos.AuthZENDecision, len(req.Evaluations)), err
	}
	if len(req.Evaluations) == 0 {
		return fail(fmt.Errorf("evaluations: no items (Evaluate asks one)"))
	}
	semantic, err := req.Opts().Semantic()
	if err != nil {
		return fail(err)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return fail(fmt.Errorf("encode the evaluations: %w", err))
	}
	var got gcos.AuthZENEvaluationsAnswer
	if err := c.do(ctx, http.MethodPost, c.base.JoinPath(gcos.AuthZENEvaluationsPath), nil, body, &got, maxAnswerBytes, c.tries); err != nil {
		return fail(err)
	}
	n := len(got.Evaluations)
	if n == 0 || n > len(req.Evaluations) || (semantic == gcos.AuthZENExecuteAll && n != len(req.Evaluations)) {
		return fail(fmt.Errorf("%w: %d answers for %d evaluations (%s)", ErrMalformed, n, len(req.Evaluations), semantic))
	}
	return got.Evaluations, nil
}
