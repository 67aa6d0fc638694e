package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"gcos"
	"gcos/client"
	"gcos/gate"
	"gcos/httpapi"
	"gcos/intake"
	"gcos/scan"
)

// exitBlock is the exit status of a gate block (SPEC §13).
const exitBlock = 3

const gateCommandName = "gate"

// gateFlags are the gate command's flags.
type gateFlags struct {
	object, action, atLeast, objectsFrom string
	server, tokenFile                    string
	explain                              bool
	token                                string // the running daemon's (reach.go), when no --server is given
	daemon                               *apiClient
}

// gateCommand is `gcos gate --object C:E [--action write|read]` or `gcos gate --objects-from FILE|-`: exit 0 only
// when every question is allowed, 3 when the gate blocks. Anything else is a block too (the gate fails closed): an
// unreachable database or server or a timeout exits 3, and invalid input (a malformed object, action or file, a
// usage or configuration error) exits 2; gateFailed prints both as a block decision whose reason is the error.
// With --server it asks a running GCOS over HTTP through the fail-closed client; otherwise it reads the database.
func (a *app) gateCommand() *cobra.Command {
	var f gateFlags
	cmd := &cobra.Command{
		Use:   gateCommandName + " --object COLLECTION:CODE [--action write|read] | --objects-from FILE|-",
		Short: "may this action proceed on these objects? exit 0 allow; 3 block, or no answer (fails closed); 2 invalid input",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if (f.object == "") == (f.objectsFrom == "") {
				return gcos.Errorf(gcos.EINVALID, "give --object COLLECTION:CODE or --objects-from FILE (- for stdin), not both")
			}
			if f.object != "" {
				// The same check as the API's 400, before anything is asked: invalid input exits 2.
				if err := gcos.CheckObjectRef(f.object); err != nil {
					return err
				}
				if f.action != gcos.ActionWrite && f.action != gcos.ActionRead {
					return gcos.Errorf(gcos.EINVALID, "--action %s: want write or read", gcos.Quote(f.action))
				}
			}
			if f.explain && (f.server != "" || f.objectsFrom != "") {
				return gcos.Errorf(gcos.EINVALID, "--explain answers one object from the database: drop --server and --objects-from (or ask gcos explain)")
			}
			if f.server == "" {
				// The daemon that serves this data dir answers as it answers pipelines; else the database does.
				if api := a.daemonAPI(cmd.Context()); api != nil {
					f.server, f.token, f.daemon = api.base, api.token, api
				}
			}
			if f.objectsFrom != "" {
				checks, err := a.readChecks(f.objectsFrom)
				if err != nil {
					return err
				}
				return a.gateBatch(cmd.Context(), f, checks)
			}
			return a.gateOne(cmd.Context(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.object, "object", "", "the object, COLLECTION:CODE")
	fl.StringVar(&f.action, "action", gcos.ActionWrite, "the action: write or read")
	fl.StringVar(&f.objectsFrom, "objects-from", "", "ask about many objects at once, from one instant: a file (- for stdin) of `OBJECT [ACTION]` lines (# comments)")
	fl.StringVar(&f.atLeast, "at-least", "", "a consistency token (a write's or an answer's): decide on at least that state")
	fl.BoolVar(&f.explain, "explain", false, "print the full statement and every row consulted (the database path)")
	fl.StringVar(&f.server, "server", os.Getenv("GCOS_SERVER"), "ask a running GCOS at this URL over HTTP (env GCOS_SERVER) instead of the database")
	fl.StringVar(&f.tokenFile, "token-file", "", "with --server: a file holding the API token (default: env GCOS_TOKEN)")
	return cmd
}

// gateClient is the fail-closed client of --server, with the token from --token-file or GCOS_TOKEN, and what every
// question asks (--at-least).
func (a *app) gateClient(f gateFlags) (*client.Client, []client.Ask, error) {
	token := os.Getenv("GCOS_TOKEN")
	if f.token != "" {
		token = f.token
	} else if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return nil, nil, gcos.Errorf(gcos.EINVALID, "--token-file: %v", err)
		}
		token = strings.TrimSpace(string(b))
	}
	if token != "" {
		a.secrets = append(a.secrets, token)
	}
	c, err := client.New(f.server, client.WithToken(token), client.WithUserAgent(cliUserAgent))
	if err != nil {
		return nil, nil, gcos.Errorf(gcos.EINVALID, "--server: %v", err)
	}
	var ask []client.Ask
	if f.atLeast != "" {
		ask = append(ask, client.AtLeast(f.atLeast))
	}
	return c, ask, nil
}

// openGate opens the store for a gate question: bounded by the gate's timeout when a database URL is given (a
// pipeline waits on this answer), with the synchronous re-scan attached as the daemon's gate has it.
func (a *app) openGate(ctx context.Context) (*gate.Gate, error) {
	if a.databaseURL != "" {
		// An unreachable server blocks within the gate's timeout instead of the operating system's connect
		// timeout. (Starting the embedded cluster is not bounded by it.)
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, a.cfg.Gate.Timeout.Duration())
		defer cancel()
	}
	store, err := a.openPrepared(ctx, false)
	if err != nil {
		return nil, err
	}
	// A question with a token waits for the daemon's intake to hand off the source writes before it (none running
	// here: it blocks at gate.timeout, naming the rows that wait).
	return gate.New(store, scan.New(store).RescanGroups, gate.WithHandOff(intake.New(store).Present)), nil
}

// gateOne asks about one object.
func (a *app) gateOne(ctx context.Context, f gateFlags) error {
	var ans gcos.GateAnswer
	var full *gate.GateResult
	if f.explain && f.daemon != nil {
		var ex httpapi.ExplainedGateResult
		q := url.Values{"object": {f.object}, "action": {f.action}, "explain": {"1"}}
		if f.atLeast != "" {
			q.Set("at_least", f.atLeast)
		}
		if err := f.daemon.get(ctx, "/v1/gate", q, &ex); err != nil {
			return err
		}
		ans, full = ex.Answer(), &ex.GateResult
	} else if f.server != "" {
		c, ask, err := a.gateClient(f)
		if err != nil {
			return err
		}
		res := c.Gate(ctx, f.object, f.action, ask...)
		if res.Err != nil {
			return res.Err // printed by gateFailed as a block
		}
		ans = res.GateAnswer
	} else {
		g, err := a.openGate(ctx)
		if err != nil {
			return err
		}
		res := g.GateWith(ctx, f.object, f.action, gate.GateOptions{AtLeast: f.atLeast})
		if res.Refused != nil {
			return res.Refused // a token the database never issued: a block, exit 2
		}
		ans, full = res.Answer(), &res
	}
	var err error
	if f.explain {
		err = a.print(httpapi.ExplainedGateResult{GateResult: *full, Reason: ans.Reason}, gateText(ans, full)) // as the API's explain=1
	} else {
		err = a.print(ans, gateText(ans, full))
	}
	if err != nil {
		return err
	}
	if !ans.Allowed() {
		return &exitError{code: exitBlock}
	}
	return nil
}

// gateBatch asks about every check at once, answered from one instant.
func (a *app) gateBatch(ctx context.Context, f gateFlags, checks []gcos.GateCheck) error {
	var out gcos.GateBatchAnswer
	if f.server != "" {
		c, ask, err := a.gateClient(f)
		if err != nil {
			return err
		}
		res := c.GateBatch(ctx, checks, ask...)
		if res.Err != nil {
			return &batchFailed{checks: checks, err: res.Err}
		}
		out = res.GateBatchAnswer
	} else {
		if err := gcos.CheckGateBatch(checks, a.cfg.Gate.BatchMax); err != nil {
			return &batchFailed{checks: checks, err: err}
		}
		g, err := a.openGate(ctx)
		if err != nil {
			return &batchFailed{checks: checks, err: err}
		}
		res := g.GateBatch(ctx, checks, gate.GateOptions{AtLeast: f.atLeast})
		if res.Refused != nil {
			return &batchFailed{checks: checks, err: res.Refused}
		}
		out = gcos.NewGateBatchAnswer(res.Answers())
		out.AsOf, out.Source, out.Token, out.Rescanned = res.AsOf, res.Source, res.Token, res.Rescanned
	}
	if err := a.print(out, gateBatchText(out)); err != nil {
		return err
	}
	if out.Decision != gcos.GateAllow {
		return &exitError{code: exitBlock}
	}
	return nil
}

// batchFailed is a batch that could not be decided once its checks were read: each is printed blocked.
type batchFailed struct {
	checks []gcos.GateCheck
	err    error
}

func (e *batchFailed) Error() string { return e.err.Error() }
func (e *batchFailed) Unwrap() error { return e.err }

// readChecks reads --objects-from: one `OBJECT [ACTION]` per line; blank lines and # comments are skipped. A
// malformed line is refused with its number; the limit is the server's (or gate.batch_max on the database path).
func (a *app) readChecks(path string) ([]gcos.GateCheck, error) {
	r, err := a.openInput("--objects-from", path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var checks []gcos.GateCheck
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) > 2 {
			return nil, gcos.Errorf(gcos.EINVALID, "--objects-from line %d: %d fields, want OBJECT [ACTION]", n, len(fields))
		}
		c := gcos.GateCheck{Object: fields[0], Action: gcos.ActionWrite}
		if len(fields) == 2 {
			c.Action = fields[1]
		}
		if err := gcos.CheckGateBatch([]gcos.GateCheck{c}, 1); err != nil {
			return nil, gcos.Errorf(gcos.EINVALID, "--objects-from line %d: %s", n, strings.TrimPrefix(gcos.ErrorMessage(err), "checks[0]: "))
		}
		checks = append(checks, c)
	}
	if err := sc.Err(); err != nil {
		return nil, gcos.Errorf(gcos.EINVALID, "--objects-from: %v", err)
	}
	if len(checks) == 0 {
		return nil, gcos.Errorf(gcos.EINVALID, "--objects-from %s: no objects", path)
	}
	return checks, nil
}

// openInput opens a command's input file, or standard input for "-"; a file that cannot be opened is invalid
// input named by its flag.
func (a *app) openInput(flag, path string) (io.ReadCloser, error) {
	if path == "-" {
		return io.NopCloser(a.stdinOrDefault()), nil
	}
	fh, err := os.Open(path)
	if err != nil {
		return nil, gcos.Errorf(gcos.EINVALID, "%s: %v", flag, err)
	}
	return fh, nil
}

// stdinOrDefault is the process's standard input (tests set their own).
func (a *app) stdinOrDefault() io.Reader {
	if a.stdin != nil {
		return a.stdin
	}
	return os.Stdin
}

// gateFailed answers a gate command that could not decide: a block, exit 3 (exit 2 for invalid input), printed as
// a decision whose reason is the error (JSON with --json, even when the flags could not be parsed); a batch prints
// every check it read blocked.
func (a *app) gateFailed(cmd *cobra.Command, args []string, err error) int {
	if errors.Is(err, context.DeadlineExceeded) {
		err = gcos.Errorf(gcos.EUNAVAILABLE, "no answer within %s", a.cfg.Gate.Timeout.Duration())
	}
	// One line: driver errors span several (one per address tried).
	reason := fmt.Sprintf("the gate could not decide (%s); it fails closed", a.redact(strings.Join(strings.Fields(err.Error()), " ")))
	a.jsonOut = a.jsonOut || slices.Contains(args, "--json") || slices.Contains(args, "--json=true")
	var v any
	var text string
	if from, _ := cmd.Flags().GetString("objects-from"); from != "" {
		var checks []gcos.GateCheck
		if bf := (*batchFailed)(nil); errors.As(err, &bf) {
			checks = bf.checks
		}
		out := gcos.NewGateBatchAnswer(gcos.BlockAll(checks, reason))
		v, text = gateBatchFailure{GateBatchAnswer: out, Error: reason}, gateBatchText(out)+"reason: "+reason+"\n"
	} else {
		object, _ := cmd.Flags().GetString("object")
		action, _ := cmd.Flags().GetString("action")
		ans := gcos.GateAnswer{Object: object, Action: action, Decision: gcos.GateBlock, Reason: reason}
		text = gateText(ans, nil)
		ans.Object, ans.Action = gcos.EchoParam("object", object), gcos.EchoParam("action", action) // refused input: escaped, shortened
		v = ans
	}
	if perr := a.print(v, text); perr != nil {
		fmt.Fprintln(a.stderr, "gcos:", perr)
	}
	var refused *client.ServerError
	if gcos.ErrorCode(err) == gcos.EINVALID || errors.As(err, &refused) && refused.Code == gcos.EINVALID {
		return exitUsage // still a block on stdout; the status says the question itself was wrong
	}
	return exitBlock
}

// gateBatchFailure is a batch's --json answer when it could not be decided.
type gateBatchFailure struct {
	gcos.GateBatchAnswer
	Error string `json:"error"`
}

// gateText is a decision for a person: the lean answer, and the full one when it was read (the database path).
func gateText(ans gcos.GateAnswer, full *gate.GateResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "decision:  %s\n", strings.ToUpper(ans.Decision))
	fmt.Fprintf(&b, "object:    %s (action %s)\n", gcos.Shown(ans.Object), gcos.Shown(ans.Action))
	if full != nil {
		fmt.Fprintf(&b, "effective: %s\n", orDash(string(full.EffectiveVerdict)))
		fmt.Fprintf(&b, "risk:      %s\n", orDash(full.RiskClass))
	}
	if ans.Rescanned {
		b.WriteString("rescanned: the gate re-scanned the stale groups it read, and decided on their fresh verdicts\n")
	}
	if ans.RescanScheduled {
		b.WriteString("rescan:    scheduled\n")
	}
	reasons := []string{ans.Reason}
	if full != nil && len(full.Reasons) > 0 {
		reasons = full.Reasons
	}
	b.WriteString("reasons:\n")
	for _, r := range reasons {
		fmt.Fprintf(&b, "  - %s\n", r)
	}
	if full != nil && full.Statement != "" {
		fmt.Fprintf(&b, "statement: %s\n", full.Statement)
	}
	if ans.Token != "" {
		fmt.Fprintf(&b, "as of:     %s (%s, token %s)\n", ans.AsOf.Format(time.RFC3339Nano), ans.Source, ans.Token)
	}
	if full != nil && len(full.Consulted) > 1 {
		b.WriteString("consulted:\n")
		for _, c := range full.Consulted {
			fmt.Fprintf(&b, "  - %s %s %s: %s\n", c.Source, c.Key, orDash(c.Scope), c.Decision)
		}
	}
	return b.String()
}

// gateBatchText is a batch's decisions for a person: one line per check, then the count and the instant.
func gateBatchText(out gcos.GateBatchAnswer) string {
	var b strings.Builder
	for _, d := range out.Decisions {
		fmt.Fprintf(&b, "%-5s  %s %s", strings.ToUpper(d.Decision), gcos.Shown(d.Object), gcos.Shown(d.Action))
		if !d.Allowed() {
			fmt.Fprintf(&b, "  %s", d.Reason)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "decision: %s (%d allowed, %d blocked)\n", strings.ToUpper(out.Decision), out.Allowed, out.Blocked)
	if out.Token != "" {
		fmt.Fprintf(&b, "as of:    %s (%s, token %s)\n", out.AsOf.Format(time.RFC3339Nano), out.Source, out.Token)
	}
	return b.String()
}
