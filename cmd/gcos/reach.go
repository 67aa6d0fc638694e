package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/client"
	"gcos/daemon"
	"gcos/httpapi"
	"gcos/postgres"
)

// How a command reaches GCOS: the running daemon's API when one serves this data dir (and the database the command
// would open), else the database itself. A daemon's embedded cluster is held by it, so a command that needs the
// database (verify, backfill, …) attaches to that cluster instead of starting it (see open).

// cliUserAgent names the CLI to the daemon, which counts the gate decisions it asks for as channel "cli".
const cliUserAgent = "gcos-cli/1"

// apiClient is a running daemon's API as the CLI reads it, through the API's client (package client): the same
// JSON the HTTP API documents, decoded into the types the database path returns, so the two paths print alike.
type apiClient struct {
	base  string
	token string
	c     *client.Client
}

// as is the client acting as the principal by: on the daemon's run token the daemon acts as it, on a principal's
// token (GCOS_TOKEN) the token's principal acts and this is ignored.
func (c *apiClient) as(by string) *apiClient {
	cp := *c
	cp.c = c.c.With(client.WithHeader(httpapi.PrincipalHeader, by))
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
	base := strings.TrimSuffix(run.URL, "/")
	opts := []client.Option{client.WithToken(token), client.WithUserAgent(cliUserAgent), client.WithTimeout(5 * time.Minute)}
	if u := osUser(); u != "" {
		opts = append(opts, client.WithHeader(httpapi.OSUserHeader, u))
	}
	c, err := client.New(base, opts...)
	if err != nil {
		a.verbosef("the daemon's run file in %s names %q: %v: reading the database", dir, run.URL, err)
		return nil
	}
	a.verbosef("through the daemon's API at %s (pid %d, %s database)", run.URL, run.PID, run.Database)
	a.api = &apiClient{base: base, token: token, c: c}
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
	return apiError(http.MethodGet, path, c.c.Get(ctx, path, query, out))
}

// post sends body to path and decodes the answer into out, as get does.
func (c *apiClient) post(ctx context.Context, path string, body, out any) error {
	return apiError(http.MethodPost, path, c.c.Post(ctx, path, body, out))
}

// apiError is the gcos error of a failed call: the one the API named, else the daemon was not reachable (or did not
// answer as the API does).
func apiError(method, path string, err error) error {
	var se *client.ServerError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se) && se.Code != "":
		return gcos.Errorf(se.Code, "%s", se.Message)
	case errors.As(err, &se):
		return gcos.Errorf(gcos.EINTERNAL, "daemon API %s %s: %v", method, path, err)
	}
	return gcos.Errorf(gcos.EUNAVAILABLE, "daemon API %s %s: %v", method, path, err)
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
