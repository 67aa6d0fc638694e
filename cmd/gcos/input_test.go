package main

import (
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// TestBadInputExitsTwo: a flag value or argument the API would answer 400 is refused before anything runs, with
// exit 2 and the API's message naming the parameter.
func TestBadInputExitsTwo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"explain", "--object", "x:\xff"}, `parameter "object": not valid UTF-8`},
		{[]string{"explain", "--group", "a\x00b"}, `parameter "group": contains a NUL byte`},
		{[]string{"invariant", "--scope", strings.Repeat("s", 513)}, `parameter "scope": 513 bytes, longer than 512`},
		{[]string{"ruleset", "show", "gov-rs-\x01"}, `ruleset version "gov-rs-\x01": want gov-rs- and 12 hex digits`},
		{[]string{"cursor", "reset", "a\x01b", "--to", "start"}, `parameter "argument 1": contains control characters`},
		{[]string{"findings", "--scpoe", "x"}, "unknown flag: --scpoe"},
		{[]string{"--log-level", "loud", "status"}, "--log-level"},
	} {
		code, stdout, stderr := runGate(t, append([]string{"--data-dir", t.TempDir()}, tc.args...)...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("gcos %q: exit %d, stderr %q; want exit %d naming %q (stdout %q)", tc.args, code, stderr, exitUsage, tc.want, stdout)
		}
	}
}

// TestRefusedInputIsEchoedSafely: a refused object id is repeated with its escape sequences escaped (never acting
// on the terminal) and a 5,000-character one shortened, in the text answer, the --json answer and the error line;
// the answer is still a block.
func TestRefusedInputIsEchoedSafely(t *testing.T) {
	t.Parallel()
	long := "users:" + strings.Repeat("x", 5000)
	for _, object := range []string{"users:\x1b[2J\x1b]0;owned\x07", long, "users:\u202eevil", "users:\xff\xfe"} {
		for _, asJSON := range []bool{false, true} {
			args := []string{"--data-dir", t.TempDir(), "gate", "--object", object}
			if asJSON {
				args = append(args, "--json")
			}
			code, stdout, stderr := runGate(t, args...)
			out := stdout + stderr
			if code != exitUsage || !strings.Contains(strings.ToLower(stdout), "block") {
				t.Errorf("gcos gate --object %.40q (json %v): exit %d, want %d and a block\n%s", object, asJSON, code, exitUsage, out)
			}
			if strings.ContainsAny(out, "\x1b\x07\u202e") || !utf8.ValidString(out) || strings.Contains(out, strings.Repeat("x", 100)) || len(out) > 2000 {
				t.Errorf("gcos gate --object %.40q (json %v) repeats the input raw or whole (%d bytes):\n%.600q", object, asJSON, len(out), out)
			}
		}
	}
}

// TestUpRefusesAnExposedListenWithoutTokens: a non-loopback --listen with no token is refused before anything
// starts (no embedded cluster, no world), naming the flag and the environment variables that fix it.
func TestUpRefusesAnExposedListenWithoutTokens(t *testing.T) {
	t.Setenv("GCOS_READER_TOKEN", "")
	t.Setenv("GCOS_OPERATOR_TOKEN", "")
	dir := filepath.Join(t.TempDir(), "data")
	for _, demo := range []bool{true, false} {
		args := []string{"--data-dir", dir, "up", "--listen", "0.0.0.0:0"}
		if demo {
			args = append(args, "--demo")
		}
		code, _, stderr := runGate(t, args...)
		if code != exitUsage {
			t.Fatalf("gcos %q: exit %d, want %d; stderr %q", args, code, exitUsage, stderr)
		}
		for _, want := range []string{"--listen", "GCOS_READER_TOKEN", "GCOS_OPERATOR_TOKEN"} {
			if !strings.Contains(stderr, want) {
				t.Errorf("gcos %q: %q does not name %s", args, stderr, want)
			}
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("gcos %q started something before refusing: %s exists (%v)", args, dir, err)
		}
	}
}

// TestSecretsAreNeverPrinted: the database password and the API tokens appear in no help text, error or log line.
func TestSecretsAreNeverPrinted(t *testing.T) {
	const password, token = "pw-s3cret-4711", "reader-tok-0815-secret"
	t.Setenv("GCOS_DATABASE_URL", "postgres://gcos:"+password+"@127.0.0.1:1/none?connect_timeout=5")
	t.Setenv("GCOS_READER_TOKEN", token)
	leaks := func(what, out string) {
		t.Helper()
		if strings.Contains(out, password) || strings.Contains(out, token) {
			t.Errorf("%s prints a secret:\n%s", what, out)
		}
	}
	for _, args := range [][]string{{"--help"}, {"up", "--help"}, {"gate", "--help"}} {
		code, stdout, stderr := runGate(t, args...)
		if code != 0 || !strings.Contains(stdout, "GCOS_DATABASE_URL") {
			t.Errorf("gcos %q: exit %d, help does not mention GCOS_DATABASE_URL:\n%s", args, code, stdout)
		}
		leaks(strings.Join(args, " "), stdout+stderr)
	}
	for _, args := range [][]string{{"status"}, {"status", "--json"}, {"--database-url", "host=127.0.0.1 port=1 password=" + password, "status"}} {
		code, stdout, stderr := runGate(t, args...)
		if code == 0 {
			t.Errorf("gcos %q against an unreachable database: exit 0", args)
		}
		leaks(strings.Join(args, " "), stdout+stderr)
	}
	// The logger redacts every string and error value, whatever the message.
	var out strings.Builder
	a := newApp(&out, &out)
	a.logLevel = "info"
	if err := a.setup(); err != nil {
		t.Fatal(err)
	}
	a.logger.Error("connect", "err", errors.New("dial postgres://gcos:"+password+"@db/gov: refused"), "token", token, "dsn", "password="+password)
	a.logger.With("system", "http").Warn("http: panic serving 127.0.0.1:1: bad token " + token) // net/http's error log
	slog.NewLogLogger(a.logger.Handler(), slog.LevelWarn).Printf("panic: postgres://gcos:%s@db/gov", password)
	leaks("a log line", out.String())
	if !strings.Contains(out.String(), "gcos:xxxxx@db") {
		t.Errorf("the log line lost more than the secret: %s", out.String())
	}
}

// TestNumericFlags: every numeric flag of every command declares its range, and a value outside it (each bound
// crossed, and garbage) exits 2 naming the flag before anything runs: no panic, no connection.
func TestNumericFlags(t *testing.T) {
	t.Parallel()
	numeric := map[string]bool{"int": true, "int64": true, "uint64": true, "float64": true, "duration": true}
	var walk func(cmd *cobra.Command)
	flags := 0
	walk = func(cmd *cobra.Command) {
		cmd.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if !numeric[f.Value.Type()] {
				return
			}
			flags++
			bounds := f.Annotations[rangeAnnotation]
			if len(bounds) != 2 {
				t.Errorf("%s --%s (%s) declares no range: call flagRange", cmd.CommandPath(), f.Name, f.Value.Type())
				return
			}
			lo, _ := strconv.ParseFloat(bounds[0], 64)
			hi, _ := strconv.ParseFloat(bounds[1], 64)
			bad := []string{"nonsense"}
			if f.Value.Type() == "duration" {
				bad = append(bad, (time.Duration(hi*float64(time.Second)) + time.Second).String(), "-1s")
			} else {
				if hi < math.MaxInt32 {
					bad = append(bad, strconv.FormatFloat(hi+1, 'f', -1, 64))
				}
				if f.Value.Type() != "uint64" {
					bad = append(bad, strconv.FormatFloat(lo-1, 'f', -1, 64))
				}
			}
			path := strings.Fields(cmd.CommandPath())[1:]
			for _, v := range bad {
				args := append(slices.Clone(path), "--"+f.Name+"="+v)
				var code int
				var stderr string
				for n := 0; n < 3; n++ { // as many placeholder arguments as the command takes
					code, _, stderr = runGate(t, append(append([]string{"--data-dir", t.TempDir()}, args...), slices.Repeat([]string{"x"}, n)...)...)
					if !strings.Contains(stderr, "arg(s)") {
						break
					}
				}
				if code != exitUsage || !strings.Contains(stderr, "--"+f.Name) || strings.Contains(stderr, "panic") {
					t.Errorf("gcos %s: exit %d, stderr %q; want exit %d naming --%s", strings.Join(args, " "), code, stderr, exitUsage, f.Name)
				}
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(newApp(io.Discard, io.Discard).rootCommand())
	if flags < 10 {
		t.Errorf("found %d numeric flags; the walk is broken", flags)
	}
}
