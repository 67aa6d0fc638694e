package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// Change is one change of the verdict change log (GET /v1/changes, /v1/changes/watch), with the cursor just past
// it: a watch resumed from Cursor delivers the changes after this one.
type Change struct {
	ID             int64      `json:"id"`
	ChangedAt      time.Time  `json:"changed_at"`
	Subject        string     `json:"subject"` // group or object
	Key            string     `json:"key"`
	ObjectRef      *string    `json:"object_ref"`
	GroupKey       string     `json:"group_key"`
	Scope          *string    `json:"scope"`
	RulesetVersion string     `json:"ruleset_version"`
	VerdictBefore  string     `json:"verdict_before"`
	VerdictAfter   string     `json:"verdict_after"`
	CoverageBefore *string    `json:"coverage_before"`
	CoverageAfter  *string    `json:"coverage_after"`
	Why            string     `json:"why"`
	DirtiedAt      *time.Time `json:"dirtied_at"`
	LatencySeconds *float64   `json:"latency_seconds"`
	RunID          string     `json:"run_id"`
	Cursor         string     `json:"-"`
}

// Cursor words Watch accepts besides a cursor.
const (
	FromStart = "start" // the oldest change the server retains
	FromNow   = "now"   // the changes committed after the watch begins
)

// Token asks the server for a consistency token of the database's present (GET /v1/token): taken after a write to
// a source registry committed, a gate question asked with it (GateAtLeast) sees that write.
func (c *Client) Token(ctx context.Context) (string, error) {
	var t struct {
		Token string `json:"token"`
	}
	if err := c.Get(ctx, "/v1/token", nil, &t); err != nil {
		return "", err
	}
	if t.Token == "" {
		return "", fmt.Errorf("%w: GET /v1/token answered no token", ErrMalformed)
	}
	return t.Token, nil
}

// GateAtLeast is Gate asked at least as fresh as token: the answer reflects every source write committed before the
// token (the server waits for its intake within gate.timeout, else blocks). The pattern for a writer of a source
// registry: commit, Token, GateAtLeast.
func (c *Client) GateAtLeast(ctx context.Context, token, object, action string) Answer {
	return c.Gate(ctx, object, action, AtLeast(token))
}

// Watch follows the verdict change log from cursor (a Change's Cursor, a page's next, FromStart or FromNow) over
// GET /v1/changes/watch, calling fn for every change in commit order. When the stream drops it resumes after the
// last change delivered (Last-Event-ID), retrying with backoff, so fn sees every change once. It returns when ctx
// ends (nil), when fn fails (its error), or when the server refuses the cursor (a *ServerError: 400 for a cursor it
// did not issue, 410 for one whose changes were pruned).
func (c *Client) Watch(ctx context.Context, cursor string, fn func(Change) error) error {
	b := c.backoff()
	for {
		delivered, err := c.watchOnce(ctx, cursor, func(ch Change) error {
			cursor = ch.Cursor
			return fn(ch)
		})
		var se *ServerError
		var stop stopped
		switch {
		case errors.As(err, &stop):
			return stop.err
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &se) && !se.temporary():
			return se
		}
		if delivered {
			b.Reset()
		}
		wait := b.NextBackOff()
		if wait == backoff.Stop {
			wait = time.Second
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// stopped carries fn's error: the watch ends with it.
type stopped struct{ err error }

func (s stopped) Error() string { return s.err.Error() }

// watchOnce reads one stream until it ends; delivered says whether it delivered a change.
func (c *Client) watchOnce(ctx context.Context, cursor string, fn func(Change) error) (delivered bool, err error) {
	u := *c.base.JoinPath("/v1/changes/watch")
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return false, err
	}
	for name, values := range c.headers {
		req.Header[name] = values
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("User-Agent", c.userAgent)
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if cursor == FromStart || cursor == FromNow {
		req.URL.RawQuery = url.Values{"after": {cursor}}.Encode()
	} else {
		req.Header.Set("Last-Event-ID", cursor)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		se := &ServerError{Status: resp.StatusCode}
		var e struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		if raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10)); json.Unmarshal(raw, &e) == nil {
			se.Code, se.Message = e.Error.Code, e.Error.Message
		}
		return false, se
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var id, event, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data += strings.TrimPrefix(line, "data: ")
		case line == "":
			if event == "change" && data != "" {
				var ch Change
				if err := json.Unmarshal([]byte(data), &ch); err != nil || id == "" {
					return delivered, fmt.Errorf("%w: a change event without a cursor or JSON", ErrMalformed)
				}
				ch.Cursor = id
				if err := fn(ch); err != nil {
					return delivered, stopped{err}
				}
				delivered = true
			}
			id, event, data = "", "", ""
		}
	}
	return delivered, sc.Err()
}
