// Package debpkg finds a program that tests need (a real Mosquitto, a real
// PostgreSQL) and, on a fresh Debian machine where the tests run as root
// (CI), installs its Debian package first. Elsewhere it says the tests must
// be skipped, and why.
package debpkg

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Program is a program tests need, found (or installed) once per test
// binary.
type Program struct {
	Package string        // the Debian package that brings it
	Look    func() string // where it is; "" when missing
	Timeout time.Duration // bounds the install (Find)

	once  sync.Once
	found string
	skip  bool
	err   error
}

// Need returns what Look finds, installing Package first where Find can.
// When the program is missing and cannot be installed here, t is skipped
// with a message saying so; when the install failed, t fails.
func (p *Program) Need(t testing.TB) string {
	t.Helper()
	p.once.Do(func() { p.found, p.skip, p.err = Find(p.Package, p.Look, p.Timeout) })
	switch {
	case p.skip:
		t.Skipf("%s is not installed and this user cannot install it (not root): apt-get install %s, or run as root", p.Package, p.Package)
	case p.err != nil:
		t.Fatalf("%s: %v", p.Package, p.err)
	}
	return p.found
}

// lockFile serialises installs across test binaries and packages: `go test
// ./...` runs packages in parallel, and two apt-gets would fight over
// dpkg's lock.
const lockFile = "/tmp/toolbus-debpkg.lock"

// Find returns what look finds (a path). When it finds nothing and the
// process is root with apt-get, it installs the Debian package pkg, with
// `apt-get update` first if the install fails (a fresh machine has no
// package lists), and looks again. skip is true when the program is missing
// and cannot be installed here. timeout bounds the wait for the lock and
// apt-get together.
func Find(pkg string, look func() string, timeout time.Duration) (found string, skip bool, err error) {
	if p := look(); p != "" {
		return p, false, nil
	}
	aptGet, aptErr := exec.LookPath("apt-get")
	if os.Geteuid() != 0 || aptErr != nil {
		return "", true, nil
	}
	lock, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", false, fmt.Errorf("install lock: %w", err)
	}
	defer lock.Close() // closing unlocks
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := flock(ctx, lock); err != nil {
		return "", false, fmt.Errorf("install lock: %w", err)
	}
	// Another test binary may have installed it while we waited.
	if p := look(); p != "" {
		return p, false, nil
	}
	apt := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, aptGet, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	if _, err := apt("install", "-y", "--no-install-recommends", pkg); err != nil {
		if out, err := apt("update"); err != nil {
			return "", false, fmt.Errorf("apt-get update: %w\n%s", err, out)
		}
		if out, err := apt("install", "-y", "--no-install-recommends", pkg); err != nil {
			return "", false, fmt.Errorf("apt-get install %s: %w\n%s", pkg, err, out)
		}
	}
	if p := look(); p != "" {
		return p, false, nil
	}
	return "", false, fmt.Errorf("apt-get installed %s, but its programs are still not where the tests look", pkg)
}

// flock takes an exclusive lock on f, polling until ctx ends.
func flock(ctx context.Context, f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
