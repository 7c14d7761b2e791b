package testenv

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Where scripts/npm-tools.sh installs the npm tools, relative to the module
// root, and the file that pins them.
const (
	npmToolsCache = ".cache/conformance"
	npmToolsPins  = "conformance/suite/package.json"
	// everythingPackage is the official MCP reference server.
	everythingPackage = "@modelcontextprotocol/server-everything"
	// everythingBin is the name of its entry script in its package.json's bin.
	everythingBin = "mcp-server-everything"
)

var everything struct {
	once sync.Once
	argv []string
	err  error
}

// ServerEverything returns the argv that starts the official MCP reference
// server, @modelcontextprotocol/server-everything, on stdio: the Node.js 22
// binary and the package's entry script that scripts/npm-tools.sh installs
// into .cache/conformance at the version conformance/suite/package.json
// pins, as absolute paths, then "stdio". Run it with exec.Command(argv[0],
// argv[1:]...), e.g. through the go-sdk's mcp.CommandTransport.
//
// When it is not installed (or not at the pinned version), the test fails
// where the environment variable CI is set, and is skipped elsewhere with a
// message saying that scripts/npm-tools.sh (or make test) installs it.
func ServerEverything(t testing.TB) []string {
	t.Helper()
	everything.once.Do(func() { everything.argv, everything.err = findServerEverything() })
	if err := everything.err; err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v (CI: scripts/npm-tools.sh, which make test runs, should have installed it)", everythingPackage, err)
		}
		t.Skipf("%s: %v: run scripts/npm-tools.sh (make test runs it) to install it", everythingPackage, err)
	}
	return append([]string(nil), everything.argv...)
}

// findServerEverything finds the installed server and Node.js.
func findServerEverything() ([]string, error) {
	node, dir, err := findNPMPackage(everythingPackage)
	if err != nil {
		return nil, err
	}
	var pkg struct {
		Bin map[string]string `json:"bin"`
	}
	if err := readJSON(filepath.Join(dir, "package.json"), &pkg); err != nil {
		return nil, err
	}
	if pkg.Bin[everythingBin] == "" {
		return nil, fmt.Errorf("%s/package.json has no bin %q", dir, everythingBin)
	}
	entry := filepath.Join(dir, filepath.FromSlash(pkg.Bin[everythingBin]))
	if fi, err := os.Stat(entry); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("its entry script %s is missing", entry)
	}
	return []string{node, entry, "stdio"}, nil
}

// NPMPackage returns the Node.js 22 binary that scripts/npm-tools.sh
// installs and the node_modules directory holding name, checked to be at
// the version conformance/suite/package.json pins, as absolute paths. Like
// ServerEverything, it fails the test under CI when they are missing, and
// skips it elsewhere.
func NPMPackage(t testing.TB, name string) (node, modules string) {
	t.Helper()
	node, dir, err := findNPMPackage(name)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("%s: %v (CI: scripts/npm-tools.sh, which make test runs, should have installed it)", name, err)
		}
		t.Skipf("%s: %v: run scripts/npm-tools.sh (make test runs it) to install it", name, err)
	}
	return node, strings.TrimSuffix(dir, string(filepath.Separator)+filepath.FromSlash(name))
}

// findNPMPackage finds the module root from the working directory (a test
// runs in its package's directory) and, under it, Node.js and the
// directory of package name at its pinned version.
func findNPMPackage(name string) (node, dir string, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	var pins struct {
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := readJSON(filepath.Join(root, npmToolsPins), &pins); err != nil {
		return "", "", err
	}
	want := pins.Dependencies[name]
	if want == "" {
		return "", "", fmt.Errorf("%s pins no %s", npmToolsPins, name)
	}
	modules := filepath.Join(root, npmToolsCache, "node_modules")
	dir = filepath.Join(modules, filepath.FromSlash(name))
	var pkg struct {
		Version string `json:"version"`
	}
	if err := readJSON(filepath.Join(dir, "package.json"), &pkg); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", "", fmt.Errorf("not installed in %s", filepath.Join(root, npmToolsCache))
		}
		return "", "", err
	}
	if pkg.Version != want {
		return "", "", fmt.Errorf("%s holds version %s, %s pins %s", dir, pkg.Version, npmToolsPins, want)
	}
	node = filepath.Join(modules, ".bin", "node")
	if fi, err := os.Stat(node); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o111 == 0 {
		return "", "", fmt.Errorf("no Node.js at %s", node)
	}
	return node, dir, nil
}

// moduleRoot returns the directory of the nearest go.mod at or above the
// working directory, as an absolute path.
func moduleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod at or above %s", wd)
		}
		dir = parent
	}
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}
