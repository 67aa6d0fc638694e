package daemon

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The run files let a second process find the daemon that serves a data dir: `gcos up` publishes its API's URL
// (api.json) and a token for it (api.token, mode 0600, an operator token made for this run), and removes both when
// it stops. A command run beside it reads them and asks the daemon over HTTP instead of opening the data dir,
// which the daemon holds.
const (
	runFileName   = "api.json"
	tokenFileName = "api.token"
)

// Running is what api.json says about the daemon that serves a data dir.
type Running struct {
	URL string `json:"url"` // the API's base URL, http://host:port
	PID int    `json:"pid"`
	// Database names the database the daemon serves without its password (user@host:port/dbname), or "embedded"
	// for the data dir's own cluster: a command pointed at another database does not use this daemon.
	Database  string    `json:"database"`
	StartedAt time.Time `json:"started_at"`
	Version   string    `json:"version"`
}

// NewRunToken is a fresh random API token for one run of the daemon.
func NewRunToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("run token: %w", err)
	}
	return "gcos-run-" + hex.EncodeToString(b), nil
}

// Publish writes dir/api.token (0600) then dir/api.json, each atomically, and returns what removes them. The
// token is written first: a reader that finds api.json finds its token.
func Publish(dir string, r Running, token string) (remove func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("publish the API: %w", err)
	}
	body, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("publish the API: %w", err)
	}
	if err := writeAtomic(filepath.Join(dir, tokenFileName), []byte(token+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, runFileName), append(body, '\n'), 0o644); err != nil {
		return nil, err
	}
	return func() {
		// Only ours: a daemon that started on this data dir after us (we lost the lock) owns the files now.
		if cur, err := readRunning(dir); err == nil && cur.PID == r.PID && cur.StartedAt.Equal(r.StartedAt) {
			_ = os.Remove(filepath.Join(dir, runFileName))
			_ = os.Remove(filepath.Join(dir, tokenFileName))
		}
	}, nil
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(mode); err == nil {
		_, err = tmp.Write(data)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err == nil {
			return nil
		}
	}
	_ = tmp.Close()
	return fmt.Errorf("write %s: %w", path, err)
}

func readRunning(dir string) (Running, error) {
	var r Running
	b, err := os.ReadFile(filepath.Join(dir, runFileName))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", filepath.Join(dir, runFileName), err)
	}
	return r, nil
}

// ErrNotRunning is Discover's answer when no live daemon serves the data dir.
var ErrNotRunning = errors.New("no gcos daemon serves this data dir")

// Discover finds the daemon that serves dir: its run file, its token, and proof that it answers (GET /healthz
// within a second). A run file left by a daemon that died (kill -9) or that does not answer is ErrNotRunning.
func Discover(ctx context.Context, dir string) (Running, string, error) {
	r, err := readRunning(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return Running{}, "", ErrNotRunning
	}
	if err != nil {
		return Running{}, "", err
	}
	if r.PID <= 0 || syscall.Kill(r.PID, 0) == syscall.ESRCH {
		return Running{}, "", ErrNotRunning
	}
	tok, err := os.ReadFile(filepath.Join(dir, tokenFileName))
	if err != nil {
		return Running{}, "", fmt.Errorf("the daemon's token: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(r.URL, "/")+"/healthz", nil)
	if err != nil {
		return Running{}, "", fmt.Errorf("%s: url: %w", runFileName, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return Running{}, "", ErrNotRunning
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return Running{}, "", ErrNotRunning
	}
	return r, strings.TrimSpace(string(tok)), nil
}

// claimFileName is the lock `gcos up` holds on its data dir for as long as it runs (Claim).
const claimFileName = "gcos.up.lock"

// BusyError says a data dir is already claimed by a running `gcos up`: who (pid) and, once it serves, where (URL).
type BusyError struct {
	Dir string
	PID int    // 0 when the holder did not record it
	URL string // empty while the holder starts (it publishes its URL once it listens)
}

func (e *BusyError) Error() string {
	who := "pid unknown"
	if e.PID > 0 {
		who = fmt.Sprintf("pid %d", e.PID)
	}
	if e.URL != "" {
		who += ", " + e.URL
	} else {
		who += ", still starting"
	}
	return fmt.Sprintf("data dir %s is claimed by a running gcos daemon (%s): nothing was started or changed; stop it, or use another --data-dir", e.Dir, who)
}

// Claim takes the data dir for one `gcos up` before it does anything else (an exclusive, non-blocking flock on
// dir/gcos.up.lock, released when the process ends, however it ends), so a second one exits at once naming the
// first (*BusyError) instead of reaching its database. release gives the claim up.
func Claim(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("claim the data dir: %w", err)
	}
	path := filepath.Join(dir, claimFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("claim the data dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("claim the data dir: lock %s: %w", path, err)
		}
		busy := &BusyError{Dir: dir}
		if b, err := os.ReadFile(path); err == nil {
			fmt.Sscan(strings.TrimSpace(string(b)), &busy.PID)
		}
		if r, err := readRunning(dir); err == nil && (busy.PID == 0 || r.PID == busy.PID) {
			busy.PID, busy.URL = r.PID, r.URL
		}
		return nil, busy
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0)
	}
	return func() { _ = f.Close() }, nil
}

// LocalURL is the URL a process on this machine uses to reach addr: an unspecified address (every interface)
// is reached on loopback.
func LocalURL(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok {
		return "http://" + addr.String()
	}
	host := tcp.IP
	if host == nil || host.IsUnspecified() {
		host = net.IPv4(127, 0, 0, 1)
		if tcp.IP != nil && tcp.IP.To4() == nil {
			host = net.IPv6loopback
		}
	}
	return "http://" + net.JoinHostPort(host.String(), strconv.Itoa(tcp.Port))
}
