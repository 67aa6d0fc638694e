package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/daemon"
	"gcos/httpapi"
	"gcos/postgres"
)

// How a command reaches GCOS: the running daemon's API when one serves this data dir (and the database the command
// would open), else the database itself. A daemon's embedded cluster is held by it, so a command that needs the
// database (verify, backfill, …) attaches to that cluster instead of starting it (see open).

// cliUserAgent names the CLI to the daemon, which counts the gate decisions it asks for as channel "cli".
const cliUserAgent = "gcos-cli/1"

// apiClient is a running daemon's API as the CLI reads it: the same JSON the HTTP API documents, decoded into the
// types the database path returns, so the two paths print alike.
type apiClient struct {
	base  string
	token string
	http  *http.Client
	// principal is the --by the CLI acts as: on the daemon's run token the daemon acts as it, on a principal's
	// token (GCOS_TOKEN) the token's principal acts and this is ignored.
	principal string
}

// as is the client acting as the principal by.
func (c *apiClient) as(by string) *apiClient {
	cp := *c
	cp.principal = by
	return &cp
}

// databaseIdentity names a database without its password, as the daemon publishes it; "embedded" is the data
// dir's own cluster.
func databaseIdentity(dsn string) string {
	if dsn == "" {
		return "embedded"
	}
	return postgres.DatabaseIdentity(dsn)
}

// daemonAPI is the API of the daemon that serves this data dir and database, or nil (then the command reads the
// database). With --verbose it says which.
func (a *app) daemonAPI(ctx context.Context) *apiClient {
	if a.api != nil {
		return a.api
	}
	dir, err := filepath.Abs(a.dataDir)
	if err != nil {
		return nil
	}
	run, token, err := daemon.Discover(ctx, dir)
	if t := strings.TrimSpace(os.Getenv(tokenEnv)); t != "" && err == nil {
		token = t // a principal's own token: the daemon acts as its principal
		a.secrets = append(a.secrets, t)
		a.verbosef("acting with the token in %s", tokenEnv)
	}
	switch {
	case errors.Is(err, daemon.ErrNotRunning):
		a.verbosef("no daemon serves %s: reading the database", dir)
		return nil
	case err != nil:
		a.verbosef("the daemon's run file in %s: %v: reading the database", dir, err)
		return nil
	case run.Database != databaseIdentity(a.databaseURL):
		a.verbosef("the daemon at %s serves %s, not this command's database: reading the database", run.URL, run.Database)
		return nil
	}
	a.secrets = append(a.secrets, token)
	a.verbosef("through the daemon's API at %s (pid %d, %s database)", run.URL, run.PID, run.Database)
	a.api = &apiClient{base: strings.TrimSuffix(run.URL, "/"), token: token, http: &http.Client{Timeout: 5 * time.Minute}}
	return a.api
}

// verbosef writes one line to stderr with --verbose.
func (a *app) verbosef(format string, args ...any) {
	if a.verbose {
		fmt.Fprintf(a.stderr, "gcos: "+format+"\n", args...)
	}
}

// get decodes GET path?query into out; a 4xx/5xx becomes the gcos error the API names (exit 2 for bad input).
func (c *apiClient) get(ctx context.Context, path string, query url.Values, out any) error {
	return c.do(ctx, http.MethodGet, path, query, nil, out)
}

func (c *apiClient) post(ctx context.Context, path string, body, out any) error {
	return c.do(ctx, http.MethodPost, path, nil, body, out)
}

func (c *apiClient) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("daemon API: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("User-Agent", cliUserAgent)
	if c.principal != "" {
		req.Header.Set(httpapi.PrincipalHeader, c.principal)
	}
	if u := osUser(); u != "" {
		req.Header.Set(httpapi.OSUserHeader, u)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return gcos.Errorf(gcos.EUNAVAILABLE, "daemon API %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return gcos.Errorf(gcos.EUNAVAILABLE, "daemon API %s %s: %v", method, path, err)
	}
	if resp.StatusCode >= 300 {
		var eb httpapi.ErrorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Error.Code != "" {
			return gcos.Errorf(eb.Error.Code, "%s", eb.Error.Message)
		}
		return gcos.Errorf(gcos.EINTERNAL, "daemon API %s %s: %s", method, path, resp.Status)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("daemon API %s %s: decode: %w", method, path, err)
	}
	return nil
}

// reachRunE is storeRunE for a command the daemon's API can answer: viaAPI when a daemon serves this data dir,
// viaStore on the database otherwise. Both return the same type, printed alike.
func reachRunE[T any](a *app, viaAPI func(ctx context.Context, api *apiClient, args []string) (T, error),
	viaStore func(ctx context.Context, store *postgres.Store, args []string) (T, error), text func(T) string) func(*cobra.Command, []string) error {
	onStore := storeRunE(a, viaStore, text)
	return func(cmd *cobra.Command, args []string) error {
		api := a.daemonAPI(cmd.Context())
		if api == nil {
			return onStore(cmd, args)
		}
		res, err := viaAPI(cmd.Context(), api, args)
		if err != nil {
			return err
		}
		return a.print(res, text(res))
	}
}
