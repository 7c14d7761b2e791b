package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/debpkg"
)

// Bounds of the Mosquitto helpers.
const (
	// mosquittoInstallTimeout bounds apt-get (update and install).
	mosquittoInstallTimeout = 5 * time.Minute
	// mosquittoStartWait bounds one start, until the port accepts.
	mosquittoStartWait = 10 * time.Second
	// mosquittoStopWait is how long Stop waits after SIGTERM before SIGKILL.
	mosquittoStopWait = 5 * time.Second
	// mosquittoStartTries is how many free ports StartMosquitto tries.
	mosquittoStartTries = 5
)

// MosquittoOptions configures StartMosquitto.
type MosquittoOptions struct {
	// Dir holds the files `toolbus acl export --format mosquitto` writes:
	// Dir/passwords, Dir/acl and Dir/toolbus.conf, which mosquitto reads
	// through include_dir, as docs/external-broker.md says. Required.
	Dir string
	// Config are extra mosquitto.conf lines, after the include: a global
	// setting here overrides the exported one.
	Config []string
}

// Mosquitto is a mosquitto process started by StartMosquitto, listening on
// 127.0.0.1 only, with the exported settings and no persistence.
type Mosquitto struct {
	// URL is tcp://127.0.0.1:port; Addr is 127.0.0.1:port. Both stay the
	// same across Restart.
	URL, Addr string

	t    testing.TB
	bin  string
	conf string
	proc
}

// mosquitto is the broker binary, found or installed once per test binary.
var mosquitto = &debpkg.Program{Package: "mosquitto", Look: lookMosquitto, Timeout: mosquittoInstallTimeout}

// MosquittoBinary returns the path of the mosquitto broker. When it is
// missing and the test runs as root where apt-get exists (CI: a fresh
// Debian), it installs Debian's mosquitto package, once per test binary
// and under a lock file across them. Otherwise the test is skipped (not
// root), or fails (the install failed).
func MosquittoBinary(t testing.TB) string {
	t.Helper()
	return mosquitto.Need(t)
}

func lookMosquitto() string {
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto", "/usr/bin/mosquitto"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// StartMosquitto starts mosquitto on a free 127.0.0.1 port with the
// exported settings of o.Dir (include_dir), and returns once the port
// accepts connections. Its log goes to t.Log.
// t.Cleanup stops it (by PID).
func StartMosquitto(t testing.TB, o MosquittoOptions) *Mosquitto {
	t.Helper()
	if o.Dir == "" {
		t.Fatal("StartMosquitto: no Dir")
	}
	bin := MosquittoBinary(t)
	m := &Mosquitto{t: t, bin: bin}
	t.Cleanup(m.Stop)
	var lastErr error
	for range mosquittoStartTries {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		m.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		m.URL = "tcp://" + m.Addr
		m.conf = filepath.Join(t.TempDir(), "mosquitto.conf")
		if err := os.WriteFile(m.conf, mosquittoConf(port, o), 0o600); err != nil {
			t.Fatal(err)
		}
		// Another process may take the port between our probe and
		// mosquitto's bind: then it exits, and we try another port.
		if lastErr = m.start(); lastErr == nil {
			return m
		}
	}
	t.Fatalf("mosquitto did not start: %v", lastErr)
	return nil
}

func mosquittoConf(port int, o MosquittoOptions) []byte {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		dir = o.Dir
	}
	conf := fmt.Sprintf(`# written by internal/testenv
listener %d 127.0.0.1
include_dir %s
persistence false
log_dest stderr
log_type error
log_type warning
log_type notice
log_type information
connection_messages true
`, port, dir)
	if os.Geteuid() == 0 {
		// As root, mosquitto would switch to the user "mosquitto", who
		// cannot read the test's temporary files.
		conf += "user root\n"
	}
	for _, l := range o.Config {
		conf += l + "\n"
	}
	return []byte(conf)
}

// freePort returns a port that was free on 127.0.0.1 a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// start runs mosquitto with m.conf and waits until m.Addr accepts.
func (m *Mosquitto) start() error {
	if err := m.run(&prefixWriter{w: Writer(m.t), prefix: "mosquitto: "}, m.bin, "-c", m.conf); err != nil {
		return err
	}
	done := m.exited()

	deadline := time.Now().Add(mosquittoStartWait)
	for {
		c, err := net.DialTimeout("tcp", m.Addr, time.Second)
		if err == nil {
			_ = c.Close()
			// The listener may be another process's (a race for a free
			// port): ours must still be running.
			select {
			case <-done:
				return fmt.Errorf("mosquitto exited (%v); %s is someone else's", m.state(), m.Addr)
			default:
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("mosquitto exited at start: %v", m.state())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.Kill()
			return fmt.Errorf("mosquitto not accepting on %s after %v", m.Addr, mosquittoStartWait)
		}
	}
}

// Stop stops mosquitto cleanly (SIGTERM; SIGKILL if it lingers). Clients
// lose their connections.
func (m *Mosquitto) Stop() {
	if !m.signal(syscall.SIGTERM, mosquittoStopWait) {
		m.Kill()
	}
}

// Kill kills mosquitto (SIGKILL) and waits for it to exit, as a crash
// would end it. It is a no-op when it is not running.
func (m *Mosquitto) Kill() {
	if !m.signal(syscall.SIGKILL, mosquittoStopWait) {
		m.t.Errorf("mosquitto (pid %d) did not exit after SIGKILL", m.pid())
	}
}

// Reload makes mosquitto read its password and ACL files again (SIGHUP).
func (m *Mosquitto) Reload() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cmd != nil {
		_ = m.cmd.Process.Signal(syscall.SIGHUP)
	}
}

// Restart stops mosquitto (if it runs) and starts it again on the same
// port, with the same files: a broker without sessions or retained
// messages (no persistence) that every client must reconnect to.
func (m *Mosquitto) Restart(t testing.TB) {
	t.Helper()
	m.Stop()
	var err error
	Poll(t, mosquittoStartWait, "mosquitto to listen again on "+m.Addr, func() bool {
		err = m.start()
		return err == nil
	})
}

// prefixWriter writes every write to w with a prefix (mosquitto writes a
// log line per write).
type prefixWriter struct {
	mu     sync.Mutex
	w      interface{ Write([]byte) (int, error) }
	prefix string
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, err := p.w.Write(append([]byte(p.prefix), b...)); err != nil {
		return 0, err
	}
	return len(b), nil
}
