// Package client asks a GCOS production gate over HTTP, and fails closed; Get and Post reach every other route of
// the API (the CLI talks to a running daemon through them).
//
// A deploy pipeline calls Gate for one object or GateBatch for many (up to the server's gate.batch_max, 1,000 by
// default, answered in request order from one instant). Every call returns a decision: the gate's, or a block the
// client made itself because it could not get one — the server is down, slow past the caller's deadline, answered
// an error, or answered something that is not a decision for the question asked. Err says which; a blocked answer
// is never mistaken for "no objection".
//
// Transport errors and the server's temporary refusals (429, 502, 503, 504; Retry-After honoured) are retried with
// exponential backoff within the caller's deadline (or WithTimeout's, when the context has none). Questions are
// reads, so a retry is safe.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"

	"gcos"
)

// Client asks one GCOS server. It is safe for concurrent use; keep one per server (it keeps connections alive).
type Client struct {
	base      *url.URL
	gate      *url.URL
	token     string
	headers   http.Header // sent with every request (WithHeader)
	hc        *http.Client
	timeout   time.Duration
	tries     uint
	backoff   func() backoff.BackOff
	userAgent string
}

// Option configures a Client.
type Option func(*Client)

// WithToken sends token as the bearer token (a reader or operator token of the server).
func WithToken(token string) Option { return func(c *Client) { c.token = token } }

// WithUserAgent names the caller in the User-Agent header (default gcos-client/1); the server counts gate
// decisions by caller channel from it (gcos-cli/… is the CLI).
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// WithHeader sends a header with every request (the CLI names the principal it acts as and its OS user this way).
func WithHeader(name, value string) Option {
	return func(c *Client) {
		c.headers = c.headers.Clone()
		if c.headers == nil {
			c.headers = http.Header{}
		}
		c.headers.Set(name, value)
	}
}

// WithHTTPClient asks through hc (its transport, proxies, TLS) instead of a client of the package's own.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithTimeout bounds a call whose context has no deadline (default 5 s): past it the answer is a block.
func WithTimeout(d time.Duration) Option { return func(c *Client) { c.timeout = d } }

// WithRetries sets how many times a call is retried after a transport error or a temporary refusal (default 3;
// 0 asks once).
func WithRetries(n uint) Option { return func(c *Client) { c.tries = n + 1 } }

// WithBackoff sets the waits between retries: the first, and the most any wait grows to (defaults 25 ms and 1 s).
func WithBackoff(initial, maxWait time.Duration) Option {
	return func(c *Client) {
		c.backoff = func() backoff.BackOff {
			b := backoff.NewExponentialBackOff()
			b.InitialInterval, b.MaxInterval = initial, maxWait
			return b
		}
	}
}

// New is a client of the server at baseURL (e.g. http://127.0.0.1:8080).
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("gcos client: server URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("gcos client: server URL %q: want http(s)://host[:port]", baseURL)
	}
	c := &Client{base: u, gate: u.JoinPath("/v1/gate"), timeout: 5 * time.Second, tries: 4, userAgent: "gcos-client/1"}
	WithBackoff(25*time.Millisecond, time.Second)(c)
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64 // a pipeline asks one server from many goroutines
		c.hc = &http.Client{Transport: tr}
	}
	return c, nil
}

// With is a copy of the client with more options (its connections shared).
func (c *Client) With(opts ...Option) *Client {
	cp := *c
	for _, o := range opts {
		o(&cp)
	}
	return &cp
}

// maxAnswerBytes bounds an answer of a route other than the gate's (a list, an explanation, a finding).
const maxAnswerBytes = 64 << 20

// Get decodes the answer of GET path?query (any route of the API: /v1/explain, /v1/findings, …) into out. Reads
// are retried as gate questions are. An error answer is a *ServerError carrying the API's error code.
func (c *Client) Get(ctx context.Context, path string, query url.Values, out any) error {
	return c.do(ctx, http.MethodGet, c.base.JoinPath(path), query, nil, out, maxAnswerBytes, c.tries)
}

// Post sends body as JSON to path and decodes the answer into out. An action is asked once, never retried: a
// request the server may have acted on is not sent twice.
func (c *Client) Post(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("encode the request to %s: %w", path, err)
	}
	return c.do(ctx, http.MethodPost, c.base.JoinPath(path), nil, b, out, maxAnswerBytes, 1)
}

// Ask qualifies a question.
type Ask func(url.Values)

// AtLeast demands a decision read from at least the state a consistency token names (a write's, or an earlier
// answer's Token).
func AtLeast(token string) Ask { return func(q url.Values) { q.Set("at_least", token) } }

// Full demands a decision read from the database, never from the server's in-process view.
func Full() Ask { return func(q url.Values) { q.Set("consistency", "full") } }

// Answer is the decision for one question. Err is set when the decision is the client's own block: the gate's
// answer could not be had (Reason then says why too).
type Answer struct {
	gcos.GateAnswer
	Err error
}

// Allowed reports whether the action may proceed: only on the gate's own allow.
func (a Answer) Allowed() bool { return a.Err == nil && a.GateAnswer.Allowed() }

// BatchAnswer is the decision for a batch: one per check, in request order. Err is set when the client blocked
// every check itself.
type BatchAnswer struct {
	gcos.GateBatchAnswer
	Err error
}

// AllAllowed reports whether every check may proceed (Allowed and Blocked count them).
func (b BatchAnswer) AllAllowed() bool { return b.Err == nil && b.Decision == gcos.GateAllow }

// Gate asks whether action (write or read; "" is write) may proceed on object (COLLECTION:CODE).
func (c *Client) Gate(ctx context.Context, object, action string, ask ...Ask) Answer {
	if action == "" {
		action = gcos.ActionWrite
	}
	q := url.Values{"object": {object}, "action": {action}}
	for _, a := range ask {
		a(q)
	}
	var got gcos.GateAnswer
	err := c.do(ctx, http.MethodGet, c.gate, q, nil, &got, 1<<20, c.tries)
	if err == nil {
		err = checkAnswer(got, gcos.GateCheck{Object: object, Action: action})
	}
	if err != nil {
		return Answer{GateAnswer: blocked(object, action, err), Err: err}
	}
	return Answer{GateAnswer: got}
}

// GateBatch asks about every check at once: the server answers them in request order from one instant.
func (c *Client) GateBatch(ctx context.Context, checks []gcos.GateCheck, ask ...Ask) BatchAnswer {
	want := make([]gcos.GateCheck, len(checks))
	for i, ch := range checks {
		want[i] = ch
		if want[i].Action == "" {
			want[i].Action = gcos.ActionWrite
		}
	}
	fail := func(err error) BatchAnswer {
		return BatchAnswer{GateBatchAnswer: gcos.NewGateBatchAnswer(gcos.BlockAll(want, reasonOf(err))), Err: err}
	}
	body, err := json.Marshal(gcos.GateBatch{Checks: want})
	if err != nil {
		return fail(fmt.Errorf("encode the batch: %w", err))
	}
	q := url.Values{}
	for _, a := range ask {
		a(q)
	}
	var got gcos.GateBatchAnswer
	if err := c.do(ctx, http.MethodPost, c.gate, q, body, &got, 64<<20, c.tries); err != nil {
		return fail(err)
	}
	if len(got.Decisions) != len(want) {
		return fail(fmt.Errorf("%w: %d decisions for %d checks", ErrMalformed, len(got.Decisions), len(want)))
	}
	for i, d := range got.Decisions {
		if err := checkAnswer(d, want[i]); err != nil {
			return fail(fmt.Errorf("decision %d: %w", i, err))
		}
	}
	// The batch's decision is the client's own count of the server's: allow only if every check is allowed.
	out := gcos.NewGateBatchAnswer(got.Decisions)
	if out.Decision != got.Decision {
		return fail(fmt.Errorf("%w: the batch says %s, its decisions %d allowed and %d blocked", ErrMalformed, got.Decision, out.Allowed, out.Blocked))
	}
	out.AsOf, out.Source, out.Token, out.Rescanned = got.AsOf, got.Source, got.Token, got.Rescanned
	return BatchAnswer{GateBatchAnswer: out}
}

// ErrMalformed is an answer that is not a decision for the question asked.
var ErrMalformed = errors.New("the server's answer is not a gate decision")

// ServerError is an error answer of the server: its status and, when it sent one, its error.
type ServerError struct {
	Status  int
	Code    string
	Message string
}

func (e *ServerError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("the server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return fmt.Sprintf("the server answered %d: %s", e.Status, e.Message)
}

// temporary reports whether a later attempt may be answered: the server shed load or a proxy lost it.
func (e *ServerError) temporary() bool {
	switch e.Status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// retryAfter is a temporary refusal that says when to ask again: the retry waits that long, and the error the
// caller sees is the server's.
type retryAfter struct {
	*ServerError
	wait error // a *backoff.RetryAfterError
}

func (e *retryAfter) Unwrap() []error { return []error{e.ServerError, e.wait} }

// do sends one question, retrying transport errors and temporary refusals within the deadline, and decodes the
// answer into out.
func (c *Client) do(ctx context.Context, method string, to *url.URL, q url.Values, body []byte, out any, maxBytes int64, tries uint) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	u := *to
	u.RawQuery = q.Encode()
	var last error
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		last = c.attempt(ctx, method, u.String(), body, out, maxBytes)
		return struct{}{}, last
	}, backoff.WithBackOff(c.backoff()), backoff.WithMaxTries(tries),
		// Never wait past the deadline: the last error is the answer then, not "context deadline exceeded".
		backoff.WithMaxElapsedTime(time.Until(deadline)))
	if err != nil && last != nil && ctx.Err() != nil && !errors.Is(last, ctx.Err()) {
		return fmt.Errorf("%w (the deadline passed while retrying)", last)
	}
	return err
}

// attempt asks once. A transport error or a temporary refusal is retryable; anything else is permanent.
func (c *Client) attempt(ctx context.Context, method, u string, body []byte, out any, maxBytes int64) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return backoff.Permanent(fmt.Errorf("build the request: %w", err))
	}
	for name, values := range c.headers {
		req.Header[name] = values
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", c.userAgent)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return backoff.Permanent(fmt.Errorf("no answer from %s: %w", req.URL.Path, ctx.Err()))
		}
		return fmt.Errorf("ask %s: %w", req.URL.Path, err) // retried
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxBytes+1))
	if err != nil {
		if ctx.Err() != nil {
			return backoff.Permanent(fmt.Errorf("read the answer of %s: %w", req.URL.Path, ctx.Err()))
		}
		return fmt.Errorf("read the answer of %s: %w", req.URL.Path, err) // retried: the connection broke mid-answer
	}
	if int64(len(raw)) > maxBytes {
		return backoff.Permanent(fmt.Errorf("%w: over %d bytes", ErrMalformed, maxBytes))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		se := &ServerError{Status: resp.StatusCode}
		var e struct {
			Error struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil {
			se.Code, se.Message = e.Error.Code, e.Error.Message
		}
		if !se.temporary() {
			return backoff.Permanent(se)
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			return &retryAfter{se, backoff.RetryAfter(s)}
		}
		return se
	}
	if mt := resp.Header.Get("Content-Type"); !strings.HasPrefix(mt, "application/json") {
		return backoff.Permanent(fmt.Errorf("%w: content type %q", ErrMalformed, mt))
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return backoff.Permanent(fmt.Errorf("%w: %v", ErrMalformed, err))
	}
	return nil
}

// checkAnswer refuses an answer that is not a decision for the check: another object or action, or a decision
// that is neither allow nor block.
func checkAnswer(a gcos.GateAnswer, c gcos.GateCheck) error {
	switch {
	case a.Object != c.Object || a.Action != c.Action:
		return fmt.Errorf("%w: an answer for %s %s, the question was %s %s", ErrMalformed, a.Object, a.Action, c.Object, c.Action)
	case a.Decision != gcos.GateAllow && a.Decision != gcos.GateBlock:
		return fmt.Errorf("%w: decision %q", ErrMalformed, a.Decision)
	}
	return nil
}

// blocked is the client's own block for a question it could not get answered.
func blocked(object, action string, err error) gcos.GateAnswer {
	return gcos.GateAnswer{Object: object, Action: action, Decision: gcos.GateBlock, Reason: reasonOf(err)}
}

func reasonOf(err error) string {
	return "the gate's answer could not be had (" + err.Error() + "); the client fails closed"
}
