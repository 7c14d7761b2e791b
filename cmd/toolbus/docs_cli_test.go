package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// docCLIRows reads the command table of docs/admin-api.md's "CLI" section:
// command -> the row's text. A cell "`mqtt-user disable`, `enable`" names
// two commands; "`clients`, `agents`" two as well.
func docCLIRows(t *testing.T) map[string]string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/admin-api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## CLI\n")
	if !ok {
		t.Fatal(`docs/admin-api.md has no "## CLI" section`)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	code := regexp.MustCompile("`([^`]+)`")
	rows := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.SplitN(line, " | ", 2)
		var prev []string
		for _, m := range code.FindAllStringSubmatch(cells[0], -1) {
			var words []string
			for _, w := range strings.Fields(m[1]) {
				if w != strings.ToUpper(w) { // FILE and the like are arguments
					words = append(words, w)
				}
			}
			if len(words) == 1 && len(prev) > 1 {
				words = append(prev[:len(prev)-1:len(prev)-1], words[0])
			}
			rows[strings.Join(words, " ")] = line
			prev = words
		}
	}
	return rows
}

// doorFlagNames are described once, above the table, not in each row.
var doorFlagNames = map[string]bool{"server": true, "token": true, "data-dir": true, "store-url": true}

// The CLI table of docs/admin-api.md lists every command of the usage
// (but serve, whose flags docs/config.md has, and version) and each of its
// flags but the door's.
func TestAdminDocListsEveryCommandAndFlag(t *testing.T) {
	isolateEnv(t)
	rows := docCLIRows(t)
	flagLine := regexp.MustCompile(`^  -([a-z][a-z0-9-]*)`)
	for _, line := range strings.Split(usage, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		words, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		var cmd []string
		for _, w := range strings.Fields(words) {
			if w != strings.ToUpper(w) { // FILE and the like are arguments
				cmd = append(cmd, w)
			}
		}
		name := strings.Join(cmd, " ")
		if name == "serve" || name == "version" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			row, ok := rows[name]
			if !ok {
				t.Fatalf("no row for %q in docs/admin-api.md's CLI table", name)
			}
			help, _, err := runCLI(t, append(cmd, "-h")...)
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(help, "\n") {
				if m := flagLine.FindStringSubmatch(l); m != nil && !doorFlagNames[m[1]] && !strings.Contains(row, "--"+m[1]) {
					t.Errorf("its row does not name --%s: %s", m[1], row)
				}
			}
		})
	}
}
