package embeddedpg

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// ErrDataDirInUse is matched (errors.Is) by the error Start returns when another process holds the data dir.
var ErrDataDirInUse = errors.New("data dir is in use by another gcos process")

// InUseError is the error Start returns when another live process holds the data dir's lock.
type InUseError struct {
	DataDir string // as given in Config.DataDir
	PID     int    // the holder's pid as it recorded it; 0 if unknown
}

func (e *InUseError) Error() string {
	pid := "pid unknown"
	if e.PID > 0 {
		pid = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("data dir %s is in use by another gcos process (%s); stop it or use --data-dir", e.DataDir, pid)
}

// Is makes errors.Is(err, ErrDataDirInUse) true.
func (e *InUseError) Is(target error) bool { return target == ErrDataDirInUse }

// heldLocks are the lock files this process holds (path → struct{}).
var heldLocks sync.Map

// forkRelease bounds the wait for a lock this process released but a child still references (see lockDataDir).
const forkRelease = 5 * time.Second

// lockDataDir takes an exclusive, non-blocking flock on path and records this process's pid in it. The lock lives
// as long as the returned file stays open (the descriptor is close-on-exec, so server processes never inherit it);
// release it with unlockDataDir.
//
// A flock belongs to the open file description, which a child forked by any goroutine shares until it execs: a
// lock this process just released can stay taken for that instant. So a busy lock that records our own pid but
// that no Cluster of ours holds is retried until the child has exec'd, instead of refusing ourselves.
func lockDataDir(path, shownDir string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	deadline := time.Now().Add(forkRelease)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		b, _ := os.ReadFile(path)
		pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if _, ours := heldLocks.Load(path); pid != os.Getpid() || ours || time.Now().After(deadline) {
			f.Close()
			return nil, &InUseError{DataDir: shownDir, PID: pid}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("record pid in lock file: %w", err)
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("record pid in lock file: %w", err)
	}
	heldLocks.Store(path, struct{}{})
	return f, nil
}

// unlockDataDir releases a lock taken by lockDataDir.
func unlockDataDir(f *os.File) error {
	heldLocks.Delete(f.Name())
	return f.Close()
}

// account is the unprivileged user the PostgreSQL programs run as when gcos runs as root.
type account struct {
	name   string
	uid    uint32
	gid    uint32
	groups []uint32 // supplementary groups
}

func (a *account) credential() *syscall.Credential {
	return &syscall.Credential{Uid: a.uid, Gid: a.gid, Groups: a.groups}
}

func (a *account) inGroup(gid uint32) bool { return gid == a.gid || slices.Contains(a.groups, gid) }

// chooseAccount returns nil when no switch is needed (not root). As root it returns the owner of an existing
// cluster directory if that is not root, else user postgres, else nobody.
func chooseAccount(pgDir string) (*account, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	if fi, err := os.Stat(pgDir); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 {
			if u, err := user.LookupId(strconv.FormatUint(uint64(st.Uid), 10)); err == nil {
				return accountOf(u)
			}
			return &account{name: "uid " + strconv.FormatUint(uint64(st.Uid), 10), uid: st.Uid, gid: st.Gid}, nil
		}
	}
	for _, name := range []string{"postgres", "nobody"} {
		if u, err := user.Lookup(name); err == nil {
			return accountOf(u)
		}
	}
	return nil, errors.New("PostgreSQL refuses to run as root and neither user postgres nor nobody exists: " +
		"create a postgres user (installing the postgresql package does) or run gcos as a normal user")
}

func accountOf(u *user.User) (*account, error) {
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	a := &account{name: u.Username, uid: uint32(uid), gid: uint32(gid)}
	if ids, err := u.GroupIds(); err == nil {
		for _, id := range ids {
			if g, err := strconv.ParseUint(id, 10, 32); err == nil && uint32(g) != a.gid {
				a.groups = append(a.groups, uint32(g))
			}
		}
	}
	return a, nil
}

// ensureSearchable makes every directory from / down to dir searchable by a, adding only the one x bit that
// applies to a (owner, group or other) where it is missing, and logging each change.
func ensureSearchable(dir string, a *account, log *slog.Logger) error {
	var chain []string
	for p := dir; ; p = filepath.Dir(p) {
		chain = append(chain, p)
		if filepath.Dir(p) == p {
			break
		}
	}
	for i := len(chain) - 1; i >= 0; i-- {
		p := chain[i]
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			continue
		}
		var bit fs.FileMode
		switch {
		case st.Uid == a.uid:
			bit = 0o100
		case a.inGroup(st.Gid):
			bit = 0o010
		default:
			bit = 0o001
		}
		if fi.Mode().Perm()&bit != 0 {
			continue
		}
		mode := fi.Mode() & (fs.ModePerm | fs.ModeSticky | fs.ModeSetuid | fs.ModeSetgid)
		if err := os.Chmod(p, mode|bit); err != nil {
			return fmt.Errorf("let user %s reach the cluster: chmod %s: %w", a.name, p, err)
		}
		log.Warn("added search permission so the PostgreSQL user can reach its data directory",
			"path", p, "user", a.name, "mode_before", fmt.Sprintf("%04o", fi.Mode().Perm()), "mode_after", fmt.Sprintf("%04o", (mode|bit).Perm()))
	}
	return nil
}

// chown gives path to a (no-op when a is nil).
func chown(path string, a *account) error {
	if a == nil {
		return nil
	}
	if err := os.Chown(path, int(a.uid), int(a.gid)); err != nil {
		return fmt.Errorf("chown %s to %s: %w", path, a.name, err)
	}
	return nil
}

// postmasterPID reads the pid recorded in <pgDir>/postmaster.pid; 0 when there is no such file.
func postmasterPID(pgDir string) (int, error) {
	b, err := os.ReadFile(filepath.Join(pgDir, "postmaster.pid"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read postmaster.pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, nil // a half-written file: nothing is running from it
	}
	return pid, nil
}

// pidExists reports whether pid exists at all, zombies included (EPERM: it exists but belongs to someone else).
// This is the test PostgreSQL applies to the pid in postmaster.pid.
func pidExists(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// processAlive reports whether pid exists and, where /proc tells, is not a zombie (an orphaned postmaster killed
// with -9 stays a zombie forever under an init that does not reap).
func processAlive(pid int) bool {
	if !pidExists(pid) {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses and may itself contain ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) && b[i+2] == 'Z' {
		return false
	}
	return true
}

// hasProc reports whether /proc can tell us about processes (Linux).
func hasProc() bool {
	_, err := os.Stat("/proc/self/cwd")
	return err == nil
}

// ownsCluster reports whether pid's working directory is pgDir: every PostgreSQL server process (postmaster and
// children) chdirs into its data directory. Unreadable (another user's process, or gone) means no.
func ownsCluster(pid int, pgDir string) bool {
	cwd, err := os.Readlink("/proc/" + strconv.Itoa(pid) + "/cwd")
	return err == nil && cwd == pgDir
}

// clusterProcesses lists the live processes running in pgDir (Linux only; nil elsewhere).
func clusterProcesses(pgDir string) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		if ownsCluster(pid, pgDir) {
			pids = append(pids, pid)
		}
	}
	return pids
}
