package main

import (
	"io"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"gcos/gcostest"
	"gcos/postgres/pgtest"
)

// TestExitCodes: every exit status means one thing — 0 success, 1 runtime error, 2 usage or invalid input (an
// unknown command, flag, argument, scope or value), 3 a gate block (gate only). Every command of the tree is
// walked: --help exits 0, an unknown flag exits 2, and so does every argument count it refuses; then each status
// is shown on a real database.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	commands := 0
	reference, err := os.ReadFile("../../docs/REFERENCE.md")
	if err != nil {
		t.Fatal(err)
	}
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		path := strings.Fields(cmd.CommandPath())[1:]
		run := func(want int, args ...string) {
			t.Helper()
			full := append(append([]string{"--data-dir", t.TempDir()}, path...), args...)
			if code, stdout, stderr := runGate(t, full...); code != want {
				t.Errorf("gcos %s: exit %d, want %d\nstdout %.300s\nstderr %.300s", strings.Join(full[2:], " "), code, want, stdout, stderr)
			}
		}
		commands++
		if !cmd.HasSubCommands() && !strings.Contains(string(reference), "| `"+cmd.CommandPath()) {
			t.Errorf("docs/REFERENCE.md does not list %s", cmd.CommandPath())
		}
		run(0, "--help")
		run(exitUsage, "--no-such-flag")
		for n := 0; n <= 3; n++ {
			args := slices.Repeat([]string{"no-such-thing"}, n)
			if cmd.Args != nil && cmd.Args(cmd, args) != nil {
				run(exitUsage, args...)
			}
		}
		for _, sub := range cmd.Commands() {
			if sub.Name() != "help" && sub.Name() != "completion" {
				walk(sub)
			}
		}
	}
	walk(newApp(io.Discard, io.Discard).rootCommand())
	if commands < 25 {
		t.Fatalf("walked %d commands; the walk is broken", commands)
	}

	w := gcostest.Ready(t, gcostest.Options{Births: 2000, Seed: 3})
	dsn := pgtest.DSN(w.Pool)
	unreachable := "postgres://gcos@127.0.0.1:1/none?connect_timeout=5"
	for _, tc := range []struct {
		want int
		args []string
	}{
		{0, []string{"--database-url", dsn, "invariant"}},
		{0, []string{"--database-url", dsn, "findings", "--open"}},
		{exitUsage, []string{"no-such-command"}},
		{exitUsage, []string{"ruleset", "no-such-command"}},
		{exitUsage, []string{"--database-url", dsn, "invariant", "--scope", "no-such-scope"}},
		{exitUsage, []string{"--database-url", dsn, "findings", "--type", "no_such_finding"}},
		{exitUsage, []string{"--database-url", dsn, "findings", "--limit", "100000"}},
		{exitUsage, []string{"--database-url", dsn, "gate", "--object", "nocolon"}},
		{exitUsage, []string{"--database-url", dsn, "ruleset", "show", "gov-rs-zz"}},
		{1, []string{"--database-url", unreachable, "status"}},
		{1, []string{"--database-url", unreachable, "invariant"}},
		{exitBlock, []string{"--database-url", dsn, "gate", "--object", "no_such_collection:x"}},
		{exitBlock, []string{"--database-url", unreachable, "gate", "--object", "a:b"}},
		// A consistency token the database never issued is bad input: a block, exit 2.
		{exitUsage, []string{"--database-url", dsn, "gate", "--object", "a:b", "--at-least", "99999999:99999999:"}},
		{0, []string{"--database-url", dsn, "changes", "--limit", "3"}},
		{0, []string{"--database-url", dsn, "changes", "--after", "start", "--limit", "3"}},
		{exitUsage, []string{"--database-url", dsn, "changes", "--after", "not-a-cursor"}},
		{exitUsage, []string{"--database-url", dsn, "changes", "--after", "now", "--since", "2026-01-01T00:00:00Z"}},
	} {
		if code, stdout, stderr := runGate(t, append([]string{"--data-dir", t.TempDir()}, tc.args...)...); code != tc.want {
			t.Errorf("gcos %s: exit %d, want %d\nstdout %.300s\nstderr %.300s", strings.Join(tc.args, " "), code, tc.want, stdout, stderr)
		}
	}
}
