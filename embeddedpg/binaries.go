package embeddedpg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries is matched (errors.Is) by the error returned when no usable PostgreSQL server binaries are found.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries found")

// serverBinaries are the programs a bin dir must hold to be usable.
var serverBinaries = []string{"initdb", "pg_ctl", "postgres"}

// fixHint tells an operator how to get past a missing installation.
const fixHint = "install PostgreSQL (e.g. `apt-get install postgresql`) or pass --database-url " +
	"(or set GCOS_DATABASE_URL) to use an existing server"

// FindBinaries returns the directory holding the PostgreSQL server binaries (initdb, pg_ctl, postgres).
// With a non-empty override only that directory is considered. Otherwise PATH is searched first, then
// /usr/lib/postgresql/*/bin (Debian, Ubuntu), /usr/pgsql-*/bin (RHEL) and /usr/local/pgsql/bin, the highest
// version first. The error matches ErrNoBinaries and says how to fix the installation.
func FindBinaries(override string) (binDir string, err error) {
	dir, _, err := findBinaries(override, true, "")
	return dir, err
}

// findBinaries picks a bin dir. When wantMajor is set (an existing cluster's PG_VERSION) it picks the first
// candidate of that major version; otherwise the first candidate. It returns the dir and its major version.
func findBinaries(override string, search bool, wantMajor string) (dir, major string, err error) {
	var candidates []string
	var where string
	switch {
	case override != "":
		abs, err := filepath.Abs(override) // commands run with the data dir as working directory
		if err != nil {
			return "", "", fmt.Errorf("bin dir %s: %w", override, err)
		}
		candidates = []string{abs}
		where = override
	case search:
		candidates = searchCandidates()
		where = "PATH or /usr/lib/postgresql/*/bin"
	default:
		where = "any directory (no bin dir given and search disabled)"
	}
	var usable []string
	for _, c := range candidates {
		if hasServerBinaries(c) {
			usable = append(usable, c)
		}
	}
	if len(usable) == 0 {
		return "", "", fmt.Errorf("%w (%s) in %s: %s", ErrNoBinaries, strings.Join(serverBinaries, ", "), where, fixHint)
	}
	var seen []string
	for _, c := range usable {
		m, err := binaryMajor(c)
		if err != nil {
			return "", "", err
		}
		if wantMajor == "" || m == wantMajor {
			return c, m, nil
		}
		seen = append(seen, m+" in "+c)
	}
	return "", "", fmt.Errorf("%w: the cluster was created by PostgreSQL %s but only found PostgreSQL %s: "+
		"install the PostgreSQL %s server, or use a new --data-dir, or pass --database-url",
		ErrNoBinaries, wantMajor, strings.Join(seen, ", "), wantMajor)
}

// searchCandidates lists bin dirs in preference order, symlinks resolved and duplicates removed.
func searchCandidates() []string {
	var out []string
	seen := map[string]bool{}
	add := func(dir string) {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			dir = real
		}
		if !seen[dir] {
			seen[dir] = true
			out = append(out, dir)
		}
	}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		if abs, err := filepath.Abs(p); err == nil {
			add(filepath.Dir(abs))
		}
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"} {
		dirs, _ := filepath.Glob(pattern)
		sort.SliceStable(dirs, func(i, j int) bool {
			return versionLess(versionOfDir(dirs[j]), versionOfDir(dirs[i]))
		})
		for _, d := range dirs {
			add(d)
		}
	}
	add("/usr/local/pgsql/bin")
	return out
}

// versionOfDir extracts "15" from /usr/lib/postgresql/15/bin or /usr/pgsql-15/bin.
func versionOfDir(binDir string) string {
	v := filepath.Base(filepath.Dir(binDir))
	return strings.TrimPrefix(v, "pgsql-")
}

// versionLess compares dotted numeric versions ("9.6" < "15"); non-numeric parts compare as 0.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x < y
		}
	}
	return false
}

func hasServerBinaries(dir string) bool {
	for _, name := range serverBinaries {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?`)

// binaryMajor runs `postgres --version` and returns the major version as PG_VERSION spells it ("15", "9.6").
func binaryMajor(binDir string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bin := filepath.Join(binDir, "postgres")
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("run %s --version: %w", bin, err)
	}
	m := versionRE.FindSubmatch(out)
	if m == nil {
		return "", fmt.Errorf("run %s --version: unrecognised output %q", bin, strings.TrimSpace(string(out)))
	}
	major, _ := strconv.Atoi(string(m[1]))
	if major < 10 && len(m[2]) > 0 {
		return string(m[1]) + "." + string(m[2]), nil
	}
	return string(m[1]), nil
}
