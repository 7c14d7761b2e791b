// Package envflag lets every flag of a toolbus command also be set through
// an environment variable: <PREFIX><FLAG NAME IN UPPER CASE, - as _>. A flag
// given on the command line wins over its variable.
package envflag

import (
	"flag"
	"fmt"
	"strings"
)

// Name is the environment variable of the flag named flagName.
func Name(prefix, flagName string) string {
	return prefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Apply sets every flag of fs that the command line left unset (call it
// after fs.Parse) from its non-empty environment variable, read through
// getenv (os.Getenv, or a map in tests). The first bad value is an error
// naming the variable.
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
				err = fmt.Errorf("%s: %w", name, e)
			}
		}
	})
	return err
}
