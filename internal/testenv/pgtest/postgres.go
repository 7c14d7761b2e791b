// Package pgtest starts throwaway PostgreSQL servers for tests. It is a
// leaf package (the standard library, pgx and debpkg only) so that the acl
// package's own tests can use it; testenv re-exports it.
package pgtest

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/toolbus/toolbus/internal/debpkg"
)

// Bounds of the PostgreSQL helpers.
const (
	// postgresInstallTimeout bounds apt-get (update and install).
	postgresInstallTimeout = 10 * time.Minute
	// postgresStartWait bounds initdb, and then one start until it accepts.
	postgresStartWait = 60 * time.Second
	// postgresStopWait bounds pg_ctl stop.
	postgresStopWait = 30 * time.Second
	// postgresStartTries is how many free ports StartPostgres tries.
	postgresStartTries = 5
	// postgresUser is the superuser initdb creates; logins over loopback
	// are trusted (the server listens on 127.0.0.1 only).
	postgresUser = "toolbus"
)

// postgres is the directory of initdb, pg_ctl and postgres, found or
// installed once per test binary.
var postgres = &debpkg.Program{Package: "postgresql", Look: lookPostgres, Timeout: postgresInstallTimeout}

// postgresDBs names databases uniquely within a test binary.
var postgresDBs atomic.Int64

// Postgres is a PostgreSQL server started by Start in a temporary
// directory, listening on 127.0.0.1 (and a unix socket in that directory),
// stopped by pg_ctl in t.Cleanup.
type Postgres struct {
	// Addr is 127.0.0.1:port.
	Addr string

	t      testing.TB
	bin    string
	dir    string // the temporary directory (owned by the server's user)
	data   string // the cluster
	runAs  *syscall.Credential
	admin  *sql.DB // to the "postgres" database, for CREATE DATABASE
	closed bool
}

// BinDir returns the directory holding initdb, pg_ctl and postgres.
// When they are missing and the test runs as root where apt-get exists (CI:
// a fresh Debian), it installs Debian's postgresql package, once per test
// binary and under a lock file across them. Otherwise the test is skipped
// (not root), or fails (the install failed).
func BinDir(t testing.TB) string {
	t.Helper()
	return postgres.Need(t)
}

func lookPostgres() string {
	dirs := []string{}
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	// Debian keeps the server binaries off PATH, one directory per major version.
	if m, _ := filepath.Glob("/usr/lib/postgresql/*/bin"); len(m) > 0 {
		for i := len(m) - 1; i >= 0; i-- { // newest first (lexical is enough for 1x)
			dirs = append(dirs, m[i])
		}
	}
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "postgres"} {
			fi, err := os.Stat(filepath.Join(d, b))
			if err != nil || fi.Mode()&0o111 == 0 {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

// Start makes a new cluster (initdb) in a temporary directory and
// starts it on a free 127.0.0.1 port, its unix socket in that directory.
// initdb and postgres refuse to run as root: as root they run as the user
// "nobody", who owns the directory. Durability is off (fsync=off): the
// cluster is thrown away with the test. t.Cleanup stops it (pg_ctl stop)
// and removes the directory.
func Start(t testing.TB) *Postgres {
	t.Helper()
	bin := BinDir(t)
	p := &Postgres{t: t, bin: bin}
	dir, err := os.MkdirTemp("", "toolbus-pg-")
	if err != nil {
		t.Fatal(err)
	}
	p.dir = dir
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("nobody")
		if err != nil {
			t.Fatalf("postgres refuses to run as root and there is no user nobody to run it as: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.runAs = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	p.data = filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(context.Background(), postgresStartWait)
	defer cancel()
	if out, err := p.command(ctx, "initdb", "-D", p.data, "-U", postgresUser, "--auth=trust",
		"-E", "UTF8", "--locale=C", "-N").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	t.Cleanup(p.stop)
	var lastErr error
	for range postgresStartTries {
		port, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		p.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if lastErr = p.start(ctx, port); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		t.Fatalf("postgres did not start: %v", lastErr)
	}
	p.admin, err = sql.Open("pgx", p.url("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.admin.PingContext(ctx); err != nil {
		t.Fatalf("postgres: connect: %v", err)
	}
	return p
}

// command prepares one of the server's programs, run as the cluster's user.
func (p *Postgres) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	cmd.Env = append(os.Environ(), "LC_ALL=C", "HOME="+p.dir)
	if p.runAs != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.runAs}
	}
	return cmd
}

// start runs pg_ctl start on port and waits (-w) until the server accepts.
func (p *Postgres) start(ctx context.Context, port int) error {
	opts := strings.Join([]string{
		"-p", strconv.Itoa(port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + p.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200",
	}, " ")
	out, err := p.command(ctx, "pg_ctl", "start", "-w", "-t", strconv.Itoa(int(postgresStartWait/time.Second)),
		"-D", p.data, "-l", filepath.Join(p.dir, "postgres.log"), "-o", opts).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
		return fmt.Errorf("pg_ctl start: %w\n%s\n%s", err, out, log)
	}
	return nil
}

// stop closes the admin connection and stops the server (fast shutdown:
// clients are disconnected).
func (p *Postgres) stop() {
	if p.closed {
		return
	}
	p.closed = true
	if p.admin != nil {
		_ = p.admin.Close()
	}
	if _, err := os.Stat(filepath.Join(p.data, "postmaster.pid")); err != nil {
		return // never started
	}
	ctx, cancel := context.WithTimeout(context.Background(), postgresStopWait)
	defer cancel()
	if out, err := p.command(ctx, "pg_ctl", "stop", "-w", "-m", "fast", "-D", p.data).CombinedOutput(); err != nil {
		p.t.Errorf("pg_ctl stop: %v\n%s", err, out)
	}
}

// url is the connection URL of database db.
func (p *Postgres) url(db string) string {
	u := url.URL{Scheme: "postgres", User: url.User(postgresUser), Host: p.Addr, Path: "/" + db,
		RawQuery: "sslmode=disable"}
	return u.String()
}

// CreateDatabase creates a new, empty database and returns its URL
// (postgres://toolbus@127.0.0.1:port/name?sslmode=disable). Each call makes
// another one, so that tests sharing a server do not see each other's rows.
// stmts run in it first (test fixtures).
func (p *Postgres) CreateDatabase(t testing.TB, stmts ...string) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%d", os.Getpid(), postgresDBs.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), postgresStartWait)
	defer cancel()
	if _, err := p.admin.ExecContext(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	u := p.url(name)
	if len(stmts) > 0 {
		db, err := sql.Open("pgx", u)
		if err != nil {
			t.Fatal(err)
		}
		defer db.Close()
		for _, s := range stmts {
			if _, err := db.ExecContext(ctx, s); err != nil {
				t.Fatalf("%s: %v", s, err)
			}
		}
	}
	return u
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
