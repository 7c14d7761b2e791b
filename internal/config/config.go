// Package config reads a toolbus config file: YAML whose keys are the
// command's flag names, applied beneath the command line and the TOOLBUS_*
// environment variables. Nested mappings join their keys with "-"
// (rate-limit: {token: 600} is rate-limit-token), and a list becomes a
// comma-separated value. Every error names the file and line at fault.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/toolbus/toolbus/internal/envflag"
)

// ErrUnknownKey is wrapped by the error for a key that is no flag of the command.
var ErrUnknownKey = errors.New("unknown setting")

// Error is a fault in a config file, at a line (0 when the file could not
// be read at all).
type Error struct {
	File string
	Line int
	Key  string // the setting, when the fault is in one
	Err  error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Key != "" {
		b.WriteString(e.Key + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// Setting is one key of the file with its value as flag text.
type Setting struct {
	Key   string
	Value string
	Line  int
}

// File is a parsed config file.
type File struct {
	Path     string
	Settings []Setting
}

// maxFileBytes bounds a config file: it is read whole, and no sane one is
// near this.
const maxFileBytes = 1 << 20

// Load reads and parses the config file at path.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &Error{File: path, Err: err}
	}
	if len(data) > maxFileBytes {
		return nil, &Error{File: path, Err: fmt.Errorf("larger than %d bytes", maxFileBytes)}
	}
	return Parse(path, data)
}

// Parse parses config text; path names it in errors.
func Parse(path string, data []byte) (*File, error) {
	f := &File{Path: path}
	if len(bytes.TrimSpace(data)) == 0 {
		return f, nil
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, &Error{File: path, Line: yamlErrorLine(err), Err: fmt.Errorf("not valid YAML: %w", err)}
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return f, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, &Error{File: path, Line: root.Line, Err: errors.New("the file must be a mapping of settings (key: value)")}
	}
	if err := f.collect("", root); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) collect(prefix string, m *yaml.Node) error {
	seen := map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return &Error{File: f.Path, Line: k.Line, Err: errors.New("a key must be a plain name")}
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "-" + key
		}
		if first, dup := seen[k.Value]; dup {
			return &Error{File: f.Path, Line: k.Line, Key: key, Err: fmt.Errorf("set twice (first on line %d)", first)}
		}
		seen[k.Value] = k.Line
		switch v.Kind {
		case yaml.MappingNode:
			if err := f.collect(key, v); err != nil {
				return err
			}
		case yaml.SequenceNode:
			items := make([]string, 0, len(v.Content))
			for _, it := range v.Content {
				if it.Kind != yaml.ScalarNode {
					return &Error{File: f.Path, Line: it.Line, Key: key, Err: errors.New("list items must be plain values")}
				}
				items = append(items, it.Value)
			}
			f.Settings = append(f.Settings, Setting{Key: key, Value: strings.Join(items, ","), Line: k.Line})
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				continue // "key:" with no value leaves the default
			}
			f.Settings = append(f.Settings, Setting{Key: key, Value: v.Value, Line: k.Line})
		default:
			return &Error{File: f.Path, Line: v.Line, Key: key, Err: errors.New("anchors and aliases are not supported")}
		}
	}
	return nil
}

// Apply sets every flag of fs that is not set yet (by the command line or
// the environment: call it after those) from the file. Every key must be a
// flag of fs, except the ones in ignore (e.g. "config" itself). The first
// fault is returned as an *Error with its line.
func (f *File) Apply(fs *flag.FlagSet, ignore ...string) error {
	if err := f.CheckKeys(fs, ignore...); err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	for _, s := range f.Settings {
		if set[s.Key] {
			continue
		}
		if err := fs.Set(s.Key, s.Value); err != nil {
			return &Error{File: f.Path, Line: s.Line, Key: s.Key, Err: envflag.ValueError(fs.Lookup(s.Key), s.Value, err)}
		}
	}
	return nil
}

// CheckKeys returns an *Error (wrapping ErrUnknownKey) for the first key
// that is no flag of fs or is one of ignore; it names the nearest setting
// when the key looks like a typo of one.
func (f *File) CheckKeys(fs *flag.FlagSet, ignore ...string) error {
	for _, s := range f.Settings {
		if fs.Lookup(s.Key) != nil && !slices.Contains(ignore, s.Key) {
			continue
		}
		var keys []string
		fs.VisitAll(func(fl *flag.Flag) {
			if !slices.Contains(ignore, fl.Name) {
				keys = append(keys, fl.Name)
			}
		})
		err := fmt.Errorf("%w (see the command's -h for the settings)", ErrUnknownKey)
		if near := envflag.Suggest(s.Key, keys); near != "" {
			err = fmt.Errorf("%w; did you mean %s?", ErrUnknownKey, near)
		}
		return &Error{File: f.Path, Line: s.Line, Key: s.Key, Err: err}
	}
	return nil
}

// yamlErrorLine digs the line out of a yaml.v3 error ("yaml: line 3: ...").
func yamlErrorLine(err error) int {
	var te *yaml.TypeError
	msg := err.Error()
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	var line int
	if i := strings.Index(msg, "line "); i >= 0 {
		_, _ = fmt.Sscanf(msg[i:], "line %d", &line)
	}
	return line
}
