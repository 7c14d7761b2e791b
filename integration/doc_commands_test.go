package integration

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// docCommand is one toolbus command line a document shows.
type docCommand struct {
	where string   // file:line
	env   []string // NAME=value assignments before it
	args  []string // after "toolbus"
	// pg marks a line of a block that works on a PostgreSQL store (it
	// names TOOLBUS_STORE_URL): TestScaleOutDocPostgres runs those.
	pg bool
}

// docCommands extracts the toolbus command lines from the sh code blocks
// of the README and docs/: continuation lines joined, comments and
// optional [--flag …] groups dropped, "a|b|c list" expanded into three.
// Summaries ("...") are left out; lines of a block that names
// TOOLBUS_STORE_URL are marked pg.
func docCommands(t *testing.T) []docCommand {
	t.Helper()
	files, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"../README.md"}, files...)
	optional := regexp.MustCompile(`\s\[[^\]]*\]`)
	assign := regexp.MustCompile(`^[A-Z_]+=('[^']*'|"[^"]*"|\S*)$`)
	var cmds []docCommand
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		inSh, pg, line, start, joined := false, false, 0, 0, ""
		for sc.Scan() {
			line++
			text := strings.TrimSpace(sc.Text())
			if strings.HasPrefix(text, "```") {
				inSh = !inSh && (text == "```sh" || text == "```bash")
				pg = false
				continue
			}
			if !inSh {
				continue
			}
			if joined == "" {
				start = line
			}
			if cont, ok := strings.CutSuffix(text, `\`); ok {
				joined += cont + " "
				continue
			}
			text, joined = joined+text, ""
			pg = pg || strings.Contains(text, "STORE_URL")
			if i := strings.Index(text, " #"); i >= 0 {
				text = text[:i]
			}
			fields := strings.Fields(optional.ReplaceAllString(text, ""))
			var env []string
			for len(fields) > 0 && assign.MatchString(fields[0]) {
				env = append(env, strings.Trim(strings.Replace(fields[0], "=", "\x00", 1), `'"`))
				fields = fields[1:]
			}
			if len(fields) < 2 || fields[0] != "toolbus" || strings.Contains(text, "...") {
				continue
			}
			where := strings.TrimPrefix(file, "../") + ":" + strconv.Itoa(start)
			for i, f := range fields { // the documents quote whole words only
				if len(f) >= 2 && (f[0] == '\'' || f[0] == '"') && f[len(f)-1] == f[0] {
					fields[i] = f[1 : len(f)-1]
				}
			}
			for _, sub := range strings.Split(fields[1], "|") {
				args := append([]string{sub}, fields[2:]...)
				var clean []string
				for _, e := range env {
					k, v, _ := strings.Cut(e, "\x00")
					clean = append(clean, k+"="+strings.Trim(v, `'"`))
				}
				cmds = append(cmds, docCommand{where: where, env: clean, args: args, pg: pg})
			}
		}
		f.Close()
	}
	return cmds
}

// Every toolbus command line the README and docs/ show runs as shown and
// exits 0, with the test's paths, server and token in place of the
// examples'. Each runs on a fresh store that holds what the line names
// (an identity it does not add, the token it revokes), through a running
// server when it has --server; serve lines are checked (--check-config),
// not started. Lines on a PostgreSQL store are TestScaleOutDocPostgres's.
func TestDocCommandLines(t *testing.T) {
	cmds := docCommands(t)
	if len(cmds) < 15 {
		t.Fatalf("%d command lines found in the docs: the extraction broke", len(cmds))
	}
	for _, c := range cmds {
		if c.pg {
			continue
		}
		t.Run(c.where+" "+strings.Join(c.args[:min(2, len(c.args))], " "), func(t *testing.T) { runDocCommand(t, c) })
	}
}

// joinsExistingStore are the documents whose commands work on the store of
// a gateway that runs already, by design: no `toolbus init` there, which
// would make a second, empty store beside it.
var joinsExistingStore = map[string]bool{
	"docs/bridge.md":      true, // an MCP server joins a running gateway's bus
	"docs/distributed.md": true, // exports the identities docs/external-broker.md made
}

// A reader who follows a document from the top on a fresh machine has no
// store yet: in each document, the first command that works on the store
// itself (no --server) is `toolbus init`, which makes it, not one that
// fails with "no toolbus store" (or serve, which a reader runs in another
// terminal after the commands that need the store).
func TestDocsStartWithInit(t *testing.T) {
	first := map[string]docCommand{}
	var files []string
	for _, c := range docCommands(t) {
		file, _, _ := strings.Cut(c.where, ":")
		if _, seen := first[file]; seen || joinsExistingStore[file] || slices.Contains(c.args, "--server") {
			continue
		}
		switch c.args[0] {
		case "init", "serve", "token", "user", "mqtt-user", "acl", "agents", "audit":
			first[file] = c
			files = append(files, file)
		}
	}
	if len(files) < 4 {
		t.Fatalf("only %d documents with store commands found: the extraction broke", len(files))
	}
	for _, file := range files {
		if c := first[file]; c.args[0] != "init" {
			t.Errorf("%s: the first store command is `toolbus %s`: start the block with `toolbus init` (--data-dir or --store-url as the block uses)",
				c.where, strings.Join(c.args, " "))
		}
	}
}

// docPassword stands for every password a document writes as '…'.
const docPassword = "doc-password-123456"

func runDocCommand(t *testing.T, c docCommand) {
	t.Helper()
	ctx := testCtx(t, 30*time.Second)
	dir := t.TempDir()
	if out, err := exec.CommandContext(ctx, bins.toolbus, "init", "--data-dir", dir).CombinedOutput(); err != nil {
		t.Fatalf("init: %v\n%s", err, out)
	}
	st, err := store.Open(ctx, dir, store.StoreOptions{HashIterations: testenv.HashIterations, BcryptCost: testenv.BcryptCost})
	if err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(c.args)
	adding := len(args) > 1 && args[0] == "mqtt-user" && args[1] == "add"
	if len(args) > 2 && args[0] == "user" && args[1] == "admin" {
		// `toolbus user admin ID on|off` works on a user who exists.
		if _, err := st.AddUser(ctx, args[2], []byte(docPassword)); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--username":
			if !adding {
				if _, err := st.AddIdentity(ctx, args[i+1], acl.RoleExpertAgent, []byte(docPassword)); err != nil {
					t.Fatal(err)
				}
			}
		case "--id":
			_, tok, err := st.CreateToken(ctx, store.TokenSpec{UserID: "alice"})
			if err != nil {
				t.Fatal(err)
			}
			args[i+1] = tok.ID
		case "--data-dir":
			args[i+1] = dir
		case "--out":
			args[i+1] = t.TempDir()
		}
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(args, "--server") {
		srv := startServer(t, server.Config{DataDir: dir})
		secret, _, err := srv.Store().CreateToken(ctx, store.TokenSpec{UserID: "root", Scopes: []string{store.ScopeAdmin}})
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(args); i++ {
			switch args[i] {
			case "--server":
				args[i+1] = "http://" + srv.HTTPAddr().String()
			case "--token":
				args[i+1] = secret
			}
		}
	}
	if args[0] == "serve" {
		args = append(args, "--check-config")
	}
	cmd := exec.CommandContext(ctx, bins.toolbus, args...)
	cmd.Env = append(os.Environ(), "TOOLBUS_DATA_DIR="+dir)
	for _, e := range c.env {
		k, v, _ := strings.Cut(e, "=")
		if v == "…" {
			v = docPassword
		}
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%s: toolbus %s\n(run as toolbus %s): %v\n%s", c.where, strings.Join(c.args, " "), strings.Join(args, " "), err, out)
	}
}
