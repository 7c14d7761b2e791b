package integration

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// settingsOf reads GET /api/v1/admin/config as name -> "value (source)";
// nil when the token is rate-limited for the moment.
func settingsOf(t *testing.T, base, token string) map[string]string {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, base+"/api/v1/admin/config", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusTooManyRequests {
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /api/v1/admin/config: %s", resp.Status)
	}
	var body struct {
		Settings []struct{ Name, Value, Source string } `json:"settings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range body.Settings {
		out[s.Name] = s.Value + " (" + s.Source + ")"
	}
	return out
}

func whoamiStatus(t *testing.T, base, token string) int {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, base+"/api/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestConfigFileAndReload: the real `toolbus serve --config` takes its
// settings from the file beneath the command line, shows them (secrets
// masked) at /api/v1/admin/config, and on SIGHUP takes the new rate limits
// and log level from the file without dropping its listeners; a bad file
// on SIGHUP changes nothing.
func TestConfigFileAndReload(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	admin := cliToken(t, data, "ops", "--scopes", "admin,tools:list,tools:call")
	user := cliToken(t, data, "ann")
	cfgFile := filepath.Join(dir, "toolbus.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("session-secret: a-secret-of-some-length\ncall-timeout: 7s\nlog-level: info\n")
	g := startServeProc(t, data, "127.0.0.1:0", "127.0.0.1:0", "--config", cfgFile, "--list-timeout", "3s")
	base := "http://" + g.httpAddr

	got := settingsOf(t, base, admin)
	for name, want := range map[string]string{
		"call-timeout": "7s (file)", "list-timeout": "3s (flag)", "session-secret": "******** (file)",
		"rate-limit-token": " (default)", "log-level": "info (file)",
	} {
		if got[name] != want {
			t.Errorf("setting %s = %q, want %q", name, got[name], want)
		}
	}
	for range 3 {
		if s := whoamiStatus(t, base, user); s != http.StatusOK {
			t.Fatalf("whoami before the limit: %d", s)
		}
	}

	write("session-secret: a-secret-of-some-length\ncall-timeout: 7s\nlog-level: debug\nrate-limit:\n  token: \"60:1\"\n")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the reloaded token limit refuses a request", func() bool {
		return whoamiStatus(t, base, user) == http.StatusTooManyRequests
	})
	poll(t, 10*time.Second, "the admin token's next request passes", func() bool {
		got = settingsOf(t, base, admin)
		return got != nil
	})
	if got["rate-limit-token"] != "60:1 (file)" || got["log-level"] != "debug (file)" || got["call-timeout"] != "7s (file)" {
		t.Errorf("after SIGHUP: rate-limit-token %q, log-level %q, call-timeout %q", got["rate-limit-token"], got["log-level"], got["call-timeout"])
	}

	// A bad file: the reload fails and the running settings stay.
	write("rate-limit:\n  token: fast\n")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the bad reload is counted", func() bool {
		return reloadErrors(t, base, admin) == 1
	})
	poll(t, 10*time.Second, "the settings after the bad reload", func() bool {
		got = settingsOf(t, base, admin)
		return got != nil
	})
	if got["rate-limit-token"] != "60:1 (file)" {
		t.Errorf("after a bad reload: rate-limit-token %q, want it unchanged", got["rate-limit-token"])
	}
	// A good file without the limit: it goes back to none.
	write("session-secret: a-secret-of-some-length\n")
	if err := g.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	poll(t, 10*time.Second, "the token limit is gone after it left the file", func() bool {
		s := settingsOf(t, base, admin)
		return s != nil && s["rate-limit-token"] == " (default)"
	})
	for range 3 {
		if s := whoamiStatus(t, base, user); s != http.StatusOK {
			t.Fatalf("whoami after the limit was removed: %d", s)
		}
	}
	if err := g.stop(t, syscall.SIGTERM, 20*time.Second); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

// reloadErrors reads toolbus_config_reloads_total{result="error"}; -1 while
// the token is rate-limited.
func reloadErrors(t *testing.T, base, token string) float64 {
	t.Helper()
	req, _ := http.NewRequestWithContext(testCtx(t, 10*time.Second), http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return -1
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return metricValue(fams, "toolbus_config_reloads_total", map[string]string{"result": "error"})
}
