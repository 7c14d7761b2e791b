package pprofserver

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
)

func TestServePprof(t *testing.T) {
	logger, hook := logtest.NewNullLogger()
	stop, err := Serve("127.0.0.1:0", logrus.NewEntry(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	addr, _ := hook.LastEntry().Data["addr"].(string)
	if addr == "" {
		t.Fatalf("no addr logged: %+v", hook.AllEntries())
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/debug/pprof/cmdline", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || len(body) == 0 {
		t.Fatalf("cmdline: %d %q", resp.StatusCode, body)
	}
}

func TestServePprofBadAddr(t *testing.T) {
	logger, _ := logtest.NewNullLogger()
	if _, err := Serve("127.0.0.1:-1", logrus.NewEntry(logger)); err == nil || !strings.Contains(err.Error(), "--pprof-addr") {
		t.Fatalf("Serve = %v, want a --pprof-addr error", err)
	}
}
