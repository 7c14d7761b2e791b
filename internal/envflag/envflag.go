// Package envflag lets every flag of a toolbus command also be set through
// an environment variable: <PREFIX><FLAG NAME IN UPPER CASE, - as _>. A flag
// given on the command line wins over its variable.
//
// It also words the errors about flags the same way for every command,
// wherever the value came from: Parse (the command line) says an unknown
// flag in one line with the nearest one ("did you mean --http-addr?"), and
// a value no flag takes is named with what the flag wants.
package envflag

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Name is the environment variable of the flag named flagName.
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Apply sets every flag of fs that the command line left unset (call it
// after fs.Parse) from its non-empty environment variable, read through
// getenv (os.Getenv, or a map in tests). The first bad value is an error
// naming the variable and the value.
func Apply(fs *flag.FlagSet, prefix string, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		name := Name(prefix, f.Name)
		if v := getenv(name); v != "" {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s: %w", name, ValueError(f, v, e))
			}
		}
	})
	return err
}

// Parse is fs.Parse as every toolbus command parses its command line: -h
// and --help print the usage (fs.Usage) and return flag.ErrHelp, as
// fs.Parse does, but an error is only returned, in one line, never printed
// with the usage around it. An unknown flag names the nearest one.
func Parse(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	// The flag package prints the error and the usage before it returns
	// the error; the caller prints the error, and the usage only buries it.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	if errors.Is(err, flag.ErrHelp) {
		if usage != nil {
			usage()
		} else {
			fmt.Fprintf(out, "Usage of %s:\n", fs.Name())
			fs.PrintDefaults()
		}
		return err
	}
	if err != nil {
		return parseError(fs, err)
	}
	return nil
}

// The errors of the flag package's Parse that parseError words anew.
var (
	unknownFlagRE  = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
	invalidValueRE = regexp.MustCompile(`^invalid (?:boolean )?value "((?:[^"\\]|\\.)*)" for (?:flag )?-([^:]+): (.*)$`)
)

// parseError rewords an error of fs.Parse: flags as --NAME (as the docs
// write them), the nearest flag for an unknown one, what a flag wants for
// a bad value.
func parseError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := unknownFlagRE.FindStringSubmatch(msg); m != nil {
		var names []string
		fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
		if s := Suggest(m[1], names); s != "" {
			return fmt.Errorf("flag provided but not defined: --%s; did you mean --%s?", m[1], s)
		}
		return fmt.Errorf("flag provided but not defined: --%s (-h lists the flags)", m[1])
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Errorf("flag needs an argument: --%s", name)
	}
	if m := invalidValueRE.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[2]); f != nil {
			value, uerr := strconv.Unquote(`"` + m[1] + `"`)
			if uerr != nil {
				value = m[1]
			}
			return fmt.Errorf("--%s: %w", f.Name, ValueError(f, value, errors.New(m[3])))
		}
	}
	return err
}

// ValueError is the error for value, which flag f refused with err: the
// value, and what f wants where its type says (a duration, a number,
// true or false); otherwise err itself, which a flag of its own type
// words for its values.
func ValueError(f *flag.Flag, value string, err error) error {
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return fmt.Errorf("invalid value %q: %w", value, err)
	}
	var want string
	switch g.Get().(type) {
	case time.Duration:
		want = "want a duration such as 30s, 5m or 1h30m"
	case int, int64:
		want = "want a whole number"
	case uint, uint64:
		want = "want a whole number, 0 or more"
	case float64:
		want = "want a number"
	case bool:
		want = "want true or false"
	default:
		return fmt.Errorf("invalid value %q: %w", value, err)
	}
	if strings.Contains(err.Error(), "out of range") {
		want = "out of range"
	}
	return fmt.Errorf("invalid value %q: %s", value, want)
}

// Suggest returns the candidate nearest to word, a likely typo of it (one
// or two letters wrong, missing, extra or swapped, fewer in a short word),
// or "" when none is near enough. Ties go to the first candidate.
func Suggest(word string, candidates []string) string {
	word = strings.ToLower(word)
	most := min(2, max(1, len(word)/3))
	best, bestDist := "", most+1
	for _, c := range candidates {
		if d := distance(word, strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// distance is the optimal string alignment distance of a and b: the
// edits (insert, delete, replace, swap two neighbours) that turn a into b.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	// d[i][j] is the distance of ra[:i] and rb[:j].
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = slices.Min([]int{d[i-1][j] + 1, d[i][j-1] + 1, d[i-1][j-1] + cost})
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}
