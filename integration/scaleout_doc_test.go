package integration

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/store"
)

// TestScaleOutDocPostgres runs the PostgreSQL path of docs/scale-out.md as
// written, with the built toolbus, from an empty database: its command
// lines in order with TOOLBUS_STORE_URL set as the block's export sets it,
// the acl export's files read by a real Mosquitto, and the serve line
// started twice (two replicas), each of which reaches Mosquitto as the
// identity the block made and serves the store's admin token.
func TestScaleOutDocPostgres(t *testing.T) {
	testenv.MosquittoBinary(t) // skip (or install) before doing anything else
	storeURL := testenv.StartPostgres(t).CreateDatabase(t)
	var block []docCommand
	for _, c := range docCommands(t) {
		if c.pg && strings.HasPrefix(c.where, "docs/scale-out.md:") {
			block = append(block, c)
		}
	}
	if len(block) < 5 {
		t.Fatalf("%d PostgreSQL command lines in docs/scale-out.md: want init, mqtt-user add, token create, acl export, serve", len(block))
	}
	ctx := testCtx(t, 2*time.Minute)
	storeEnv := "TOOLBUS_STORE_URL=" + storeURL
	var gwPassword, adminToken, exportDir string
	var serve *docCommand
	for _, c := range block {
		args := slices.Clone(c.args)
		switch args[0] {
		case "serve":
			serve = &c // once the broker runs
			continue
		case "acl":
			for i := range args[:len(args)-1] {
				if args[i] == "--out" {
					exportDir = t.TempDir()
					args[i+1] = exportDir
				}
			}
		}
		cmd := exec.CommandContext(ctx, bins.toolbus, args...)
		cmd.Env = append(append(os.Environ(), storeEnv), c.env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: toolbus %s: %v\n%s%s", c.where, strings.Join(c.args, " "), err, out, stderrOf(err))
		}
		switch strings.Join(args[:min(2, len(args))], " ") {
		case "mqtt-user add":
			gwPassword = lastLineOf(string(out))
		case "token create":
			adminToken = lastLineOf(string(out))
		}
	}
	if gwPassword == "" || adminToken == "" || exportDir == "" || serve == nil {
		t.Fatalf("the block did not make the gateways' identity (%t), an admin token (%t), an export (%t) and a serve line (%t)",
			gwPassword != "", adminToken != "", exportDir != "", serve != nil)
	}
	mosq := testenv.StartMosquitto(t, testenv.MosquittoOptions{Dir: exportDir})

	for replica := range 2 {
		args := slices.Clone(serve.args)
		for i := range args[:len(args)-1] {
			switch args[i] {
			case "--broker-url":
				args[i+1] = mosq.URL
			case "--session-secret":
				args[i+1] = soSessionSecret
			}
		}
		args = append(args, "--http-addr", "127.0.0.1:0", "--log-format", "text")
		env := []string{storeEnv}
		for _, e := range serve.env {
			env = append(env, strings.Replace(e, "=…", "="+gwPassword, 1))
		}
		lines := make(chan string, 64)
		p := startProc(t, lines, "/usr/bin/env", append(append(env, bins.toolbus), args...)...)
		addr := p.waitLine(t, lines, 30*time.Second, "the address line", func(l string) bool {
			if strings.HasPrefix(l, "toolbus: no token yet") {
				t.Errorf("replica %d hints a first token, but the block made one: %q", replica, l)
			}
			return strings.HasPrefix(l, "toolbus: http://")
		})
		base := strings.TrimSuffix(strings.Fields(addr)[1], "/api/v1/mcp")
		// Ready only while its link to Mosquitto is up: the identity the
		// block made, in the files it exported, lets the replica in.
		poll(t, 20*time.Second, "replica ready with Mosquitto", func() bool {
			res, err := http.Get(base + "/readyz")
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
		out, err := exec.CommandContext(ctx, bins.toolbus, "token", "list", "--server", base, "--token", adminToken).CombinedOutput()
		if err != nil || !strings.Contains(string(out), store.TokenIDOf(adminToken)) {
			t.Fatalf("replica %d: token list through it with the block's admin token: %v\n%s", replica, err, out)
		}
	}
}

// A `toolbus serve` on an empty PostgreSQL store says how to make the first
// token, as on a data directory, without printing the URL (it holds a
// password); the command it prints works in a shell with TOOLBUS_STORE_URL
// set, and once a token exists serve says nothing of the kind.
func TestServeHintsFirstTokenPostgres(t *testing.T) {
	storeURL := testenv.StartPostgres(t).CreateDatabase(t)
	env := append(os.Environ(), "TOOLBUS_STORE_URL="+storeURL)
	serve := func() (hint string) {
		t.Helper()
		lines := make(chan string, 64)
		p := startProc(t, lines, "/usr/bin/env", "TOOLBUS_STORE_URL="+storeURL, bins.toolbus, "serve",
			"--http-addr", "127.0.0.1:0", "--mqtt-addr", "127.0.0.1:0")
		p.waitLine(t, lines, 30*time.Second, "the address line", func(l string) bool {
			if strings.HasPrefix(l, "toolbus: no token yet") {
				hint = l
			}
			return strings.HasPrefix(l, "toolbus: http://") // printed after the hint, if any
		})
		if err := p.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
			t.Errorf("serve stop: %v", err)
		}
		return hint
	}
	hint := serve()
	_, cmdLine, ok := strings.Cut(hint, "create the first: ")
	if !ok || !strings.Contains(cmdLine, `--store-url "$TOOLBUS_STORE_URL"`) || strings.Contains(hint, "postgres://") {
		t.Fatalf("fresh serve on PostgreSQL: hint %q", hint)
	}
	sh := exec.CommandContext(testCtx(t, 30*time.Second), "sh", "-c", strings.ReplaceAll(cmdLine, "YOU", "root"))
	sh.Env = append(env, "PATH="+filepath.Dir(bins.toolbus)+":"+os.Getenv("PATH"))
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the printed command failed: %v\n%s", err, out)
	}
	if hint := serve(); hint != "" {
		t.Errorf("serve with a token still hints: %q", hint)
	}
}

// lastLineOf is the last line of a command's output: the secret of token
// create, the password of mqtt-user add --generate-password.
func lastLineOf(out string) string {
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// stderrOf is what a failed command wrote to standard error.
func stderrOf(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}
