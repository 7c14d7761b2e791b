package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// nobodyUID is the user the test's Mosquitto runs as: another user than
// the export's, as Debian's runs as "mosquitto".
const nobodyUID = 65534

// TestACLExportKeepsOwnerForMosquitto: a Mosquitto that runs as another
// user reads the password file an operator gave it; an export after a
// change keeps that file's owner and mode, so that the reload lets the new
// identity in (before, the export left it root's, 0600, and the reloaded
// broker refused every login). An export that leaves a file the broker
// cannot read says so, naming the broker's pid and user.
func TestACLExportKeepsOwnerForMosquitto(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: gives files to another user and runs Mosquitto as one")
	}
	bin := testenv.MosquittoBinary(t)
	ctx := testCtx(t, 60*time.Second)
	dataDir := t.TempDir()
	// Mosquitto, as nobody, reads here: a directory everyone may enter.
	out, err := os.MkdirTemp("", "toolbus-export-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(out) })
	if err := os.Chmod(out, 0o755); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, dataDir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	for name, role := range map[string]acl.Role{"gw": acl.RolePlatform, "search-agent": acl.RoleExpertAgent} {
		if _, err := st.AddIdentity(ctx, name, role, []byte(extPassword)); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	export := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, bins.toolbus, append([]string{"acl", "export", "--data-dir", dataDir, "--out", out}, args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("acl export: %v\n%s", err, stderr.String())
		}
		return stderr.String()
	}
	passwords := filepath.Join(out, "passwords")
	export()
	// The operator's fix of the first export: the broker's user reads it.
	if err := os.Chown(passwords, nobodyUID, nobodyUID); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(passwords, 0o640); err != nil {
		t.Fatal(err)
	}
	mosq := startMosquittoAs(t, bin, out, "nobody")
	if _, err := dialMQTT(t, mosq.url, "search-agent", extPassword, "search-1", nil); err != nil {
		t.Fatalf("login before the change: %v", err)
	}

	// A new identity, exported again, and the broker reloaded.
	add := exec.CommandContext(ctx, bins.toolbus, "mqtt-user", "add", "--data-dir", dataDir, "--username", "files-agent", "--role", "expert-agent")
	add.Stdin = strings.NewReader(extPassword + "\n")
	if b, err := add.CombinedOutput(); err != nil {
		t.Fatalf("mqtt-user add: %v\n%s", err, b)
	}
	if warned := export(); strings.Contains(warned, "warning") {
		t.Errorf("export warned of a file the broker reads: %s", warned)
	}
	fi, err := os.Stat(passwords)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := acl.OwnerOf(fi); o != (acl.FileOwner{UID: nobodyUID, GID: nobodyUID}) || fi.Mode().Perm() != 0o640 {
		t.Errorf("passwords after the export: owner %d:%d mode %#o, want %d:%d %#o (kept)", o.UID, o.GID, fi.Mode().Perm(), nobodyUID, nobodyUID, 0o640)
	}
	mosq.reload(t)
	var loginErr error
	poll(t, 10*time.Second, "the new identity to log in after the reload", func() bool {
		_, loginErr = dialMQTT(t, mosq.url, "files-agent", extPassword, "files-1", nil)
		return loginErr == nil
	})

	// --owner gives it to root: the broker could not read it, and the
	// export says so.
	warned := export("--owner", "root")
	want := fmt.Sprintf("warning: mosquitto (pid %d) runs as nobody, which cannot read %s", mosq.cmd.Process.Pid, passwords)
	if !strings.Contains(warned, want) || !strings.Contains(warned, "--owner nobody") {
		t.Errorf("export --owner root said %q, want a warning with %q", warned, want)
	}
	if fi, err := os.Stat(passwords); err != nil {
		t.Fatal(err)
	} else if o, _ := acl.OwnerOf(fi); o.UID != 0 {
		t.Errorf("passwords owned by %d after --owner root", o.UID)
	}
}

// userMosquitto is a Mosquitto the test started as another user.
type userMosquitto struct {
	cmd *exec.Cmd
	url string
}

// startMosquittoAs starts Mosquitto on a free loopback port with the
// export in dir, dropping to user after it starts (testenv's always stays
// root as root), and waits until it accepts connections.
func startMosquittoAs(t *testing.T, bin, dir, user string) *userMosquitto {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	conf := filepath.Join(dir, "test-mosquitto.conf.in") // not *.conf: include_dir reads those
	if err := os.WriteFile(conf, fmt.Appendf(nil, "listener %d 127.0.0.1\ninclude_dir %s\npersistence false\nuser %s\nlog_dest stderr\n",
		port, dir, user), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-c", conf)
	cmd.Stdout, cmd.Stderr = testenv.Writer(t), testenv.Writer(t)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	poll(t, 10*time.Second, "mosquitto to listen on "+addr, func() bool {
		select {
		case <-exited:
			t.Fatalf("mosquitto exited at start")
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return &userMosquitto{cmd: cmd, url: "tcp://" + addr}
}

// reload makes Mosquitto read its password and ACL files again.
func (m *userMosquitto) reload(t *testing.T) {
	t.Helper()
	if err := m.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
}

// TestStoreChangeSaysExportDue: a change of identities or rules on a store
// that holds a platform identity (its gateways use an external broker,
// which knows only what the last export wrote) says on stderr that an
// export and a broker reload are due, with the command; on a store without
// one (the embedded broker's, which reads the store itself) it says nothing
// of the kind.
func TestStoreChangeSaysExportDue(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	for _, tc := range []struct {
		name     string
		platform bool
	}{
		{"external broker", true},
		{"embedded broker", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dataDir := t.TempDir()
			st, err := store.Open(ctx, dataDir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
			if err != nil {
				t.Fatal(err)
			}
			if tc.platform {
				if _, err := st.AddIdentity(ctx, "gw", acl.RolePlatform, []byte(extPassword)); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			for _, args := range [][]string{
				{"mqtt-user", "add", "--username", "files-agent", "--role", "expert-agent"},
				{"mqtt-user", "disable", "--username", "files-agent"},
				{"acl", "rule", "add", "--username", "files-agent", "--access", "read", "--filter", "sensors/#"},
				{"acl", "rule", "remove", "--id", "1"},
				{"mqtt-user", "remove", "--username", "files-agent"},
			} {
				cmd := exec.CommandContext(ctx, bins.toolbus, append(args, "--data-dir", dataDir)...)
				cmd.Stdin = strings.NewReader(extPassword + "\n")
				var stdout, stderr strings.Builder
				cmd.Stdout, cmd.Stderr = &stdout, &stderr
				if err := cmd.Run(); err != nil {
					t.Fatalf("%v: %v\n%s%s", args, err, stdout.String(), stderr.String())
				}
				want := "toolbus acl export --data-dir " + dataDir + " --out DIR"
				if said := strings.Contains(stderr.String(), want) && strings.Contains(stderr.String(), "reload the broker"); said != tc.platform {
					t.Errorf("%v: stderr %q; says an export is due: %t, want %t", args, stderr.String(), said, tc.platform)
				}
			}
		})
	}
}
