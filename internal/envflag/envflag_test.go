package envflag_test

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/internal/envflag"
)

func TestApply(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string
		wantN   int
		wantErr string
	}{
		{name: "default", want: "d", wantN: 1},
		{name: "from env", env: map[string]string{"X_HTTP_ADDR": "e", "X_COUNT": "7"}, want: "e", wantN: 7},
		{name: "flag wins", args: []string{"--http-addr", "f"}, env: map[string]string{"X_HTTP_ADDR": "e"}, want: "f", wantN: 1},
		{name: "empty env ignored", env: map[string]string{"X_HTTP_ADDR": ""}, want: "d", wantN: 1},
		{name: "bad value", env: map[string]string{"X_COUNT": "many"}, wantErr: "X_COUNT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			addr := fs.String("http-addr", "d", "")
			n := fs.Int("count", 1, "")
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := envflag.Apply(fs, "X_", func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || *addr != tc.want || *n != tc.wantN {
				t.Fatalf("got %q %d %v, want %q %d", *addr, *n, err, tc.want, tc.wantN)
			}
		})
	}
}
