package console_test

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// settingsServer is a real toolbus whose effective settings are list and
// whose console reload does reload (nil: no reload button). The server's
// logger starts at info.
func settingsServer(t *testing.T, list []admin.Setting, reload func(context.Context, *server.Server) error) (*server.Server, string, *logrus.Entry) {
	t.Helper()
	var srvp atomic.Pointer[server.Server]
	cfg := server.Config{Settings: func() []admin.Setting { return list }}
	cfg.Audit.AggregateWindow = -1
	cfg.Audit.FlushInterval = 20 * time.Millisecond
	cfg.Logger = testenv.LoggerAt(t, "", logrus.InfoLevel)
	if reload != nil {
		cfg.Console.Reload = func(ctx context.Context) error { return reload(ctx, srvp.Load()) }
	}
	srv, base := startConsoleWith(t, cfg)
	srvp.Store(srv)
	return srv, base, cfg.Logger
}

var settingRowRE = regexp.MustCompile(`<tr data-setting="([^"]*)" data-source="([^"]*)"><td class="mono">[^<]*</td><td class="mono setting-value">([^<]*)</td>`)

func settingRows(body string) []string {
	var out []string
	for _, m := range settingRowRE.FindAllStringSubmatch(body, -1) {
		out = append(out, m[1]+"="+m[3]+" ("+m[2]+")")
	}
	return out
}

var testSettings = []admin.Setting{
	{Name: "session-secret", Value: "********", Source: "env"},
	{Name: "call-timeout", Value: "7s", Source: "file"},
	{Name: "rate-limit-token", Value: "", Source: "default"},
	{Name: "http-addr", Value: "127.0.0.1:0", Source: "flag"},
	{Name: "log-level", Value: "info", Source: "file"},
}

// TestConsoleSettings: the page lists the model's settings by name with
// their values and sources (secrets as the model masks them); the name
// filter narrows the list; the Reload button does what the process's
// reload does (here the log level), says so, and is audited in the
// operator's name.
func TestConsoleSettings(t *testing.T) {
	var reloads atomic.Int32
	_, base, log := settingsServer(t, testSettings, func(ctx context.Context, srv *server.Server) error {
		reloads.Add(1)
		lv := logrus.WarnLevel
		return srv.Reload(ctx, server.Reload{LogLevel: &lv})
	})
	c := browser(t)
	signIn(t, c, base, "ops")
	resp, body := do(t, c, http.MethodGet, base+"/console/settings", nil, nil)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("settings: %d\n%s", resp.StatusCode, body)
	}
	want := "call-timeout=7s (file) http-addr=127.0.0.1:0 (flag) log-level=info (file) rate-limit-token= (default) session-secret=******** (env)"
	if got := strings.Join(settingRows(body), " "); got != want {
		t.Errorf("settings:\n got %s\nwant %s", got, want)
	}
	if !strings.Contains(body, `id="reload-button"`) || !strings.Contains(body, `action="/console/settings/reload"`) || !strings.Contains(body, `<label for="settings-filter">`) {
		t.Errorf("no reload form or filter")
	}
	_, body = do(t, c, http.MethodGet, base+"/console/settings?q=RATE", nil, nil)
	if got := strings.Join(settingRows(body), " "); got != "rate-limit-token= (default)" || !strings.Contains(body, "1 of 5") {
		t.Errorf("filtered: %q", got)
	}
	_, body = do(t, c, http.MethodGet, base+"/console/settings?q=%3Cb%3Enone", nil, nil)
	if len(settingRows(body)) != 0 || !strings.Contains(body, "No setting's name holds “&lt;b&gt;none”") {
		t.Errorf("filter with no match:\n%s", body)
	}

	if log.Logger.GetLevel() != logrus.InfoLevel {
		t.Fatalf("log level %v before the reload", log.Logger.GetLevel())
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/settings/reload", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `class="done"`) || !strings.Contains(body, "Settings reloaded") || reloads.Load() != 1 {
		t.Fatalf("reload: %d, %d reloads\n%s", resp.StatusCode, reloads.Load(), body)
	}
	if log.Logger.GetLevel() != logrus.WarnLevel {
		t.Errorf("log level %v after the reload, want warning", log.Logger.GetLevel())
	}
	if len(settingRows(body)) != 5 {
		t.Errorf("the page after the reload does not list the settings")
	}
}

// TestConsoleSettingsReloadAudit: a reload from the page is a console
// audit record "settings.reload" naming the operator; a failed one
// (a bad config file) shows the error naming file and line, answers 422
// and is recorded with outcome error and the reason.
func TestConsoleSettingsReloadAudit(t *testing.T) {
	fail := atomic.Bool{}
	srv, base, _ := settingsServer(t, testSettings, func(ctx context.Context, srv *server.Server) error {
		if fail.Load() {
			return errors.New(`/etc/toolbus.yaml:3: --rate-limit-token: "fast" is not N or N:BURST`)
		}
		return srv.Reload(ctx, server.Reload{})
	})
	c := browser(t)
	signIn(t, c, base, "ops")
	if resp, _ := do(t, c, http.MethodPost, base+"/console/settings/reload", url.Values{}, nil); resp.StatusCode != http.StatusOK {
		t.Fatalf("reload: %d", resp.StatusCode)
	}
	e := consoleAudit(t, srv, "of the reload", func(e store.AuditEvent) bool { return e.Action == "settings.reload" && e.Outcome == "ok" })
	if e.UserID != "ops" || e.Kind != store.AuditConsole || e.Source == "" {
		t.Errorf("reload record %+v", e)
	}
	fail.Store(true)
	resp, body := do(t, c, http.MethodPost, base+"/console/settings/reload", url.Values{}, nil)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, `role="alert"`) ||
		!strings.Contains(body, "/etc/toolbus.yaml:3: --rate-limit-token: &#34;fast&#34; is not N or N:BURST") ||
		!strings.Contains(body, "the running settings stay") {
		t.Fatalf("failed reload: %d\n%s", resp.StatusCode, body)
	}
	e = consoleAudit(t, srv, "of the failed reload", func(e store.AuditEvent) bool { return e.Action == "settings.reload" && e.Outcome == "error" })
	if e.UserID != "ops" || !strings.Contains(e.Reason, "toolbus.yaml:3") {
		t.Errorf("failed reload record %+v", e)
	}
}

// TestConsoleSettingsNoReload: without Options.Reload the page says how
// a reload is done and has no button; a post to it reloads nothing (404).
// A console without a server's settings says so.
func TestConsoleSettingsNoReload(t *testing.T) {
	_, base, _ := settingsServer(t, testSettings, nil)
	c := browser(t)
	signIn(t, c, base, "ops")
	resp, body := do(t, c, http.MethodGet, base+"/console/settings", nil, nil)
	if resp.StatusCode != http.StatusOK || strings.Contains(body, "reload-button") || strings.Contains(body, "/console/settings/reload") ||
		!strings.Contains(body, `id="reload-none"`) || !strings.Contains(body, "SIGHUP") || len(settingRows(body)) != 5 {
		t.Fatalf("settings without reload: %d\n%s", resp.StatusCode, body)
	}
	if resp, body := do(t, c, http.MethodPost, base+"/console/settings/reload", url.Values{}, nil); resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "No reload from here") {
		t.Errorf("reload without a reloader: %d\n%s", resp.StatusCode, body)
	}

	_, base = startConsole(t) // no Settings in the server's config
	c = browser(t)
	signIn(t, c, base, "ops")
	if resp, body := do(t, c, http.MethodGet, base+"/console/settings", nil, nil); resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="settings-unknown"`) {
		t.Errorf("settings of a server without them: %d\n%s", resp.StatusCode, body)
	}
}

// TestConsoleSettingsRefusals: without a session the page and the reload
// answer the sign-in form (and nothing reloads); a user without the admin
// role gets no session; a reload posted from another site is refused.
func TestConsoleSettingsRefusals(t *testing.T) {
	var reloads atomic.Int32
	_, base, _ := settingsServer(t, testSettings, func(context.Context, *server.Server) error { reloads.Add(1); return nil })
	for _, c := range []struct {
		name string
		user string
	}{{"no session", ""}, {"not an admin", "dev"}} {
		t.Run(c.name, func(t *testing.T) {
			cl := browser(t)
			if c.user != "" {
				if resp := signIn(t, cl, base, c.user); resp.StatusCode != http.StatusForbidden {
					t.Fatalf("sign-in of %s: %d", c.user, resp.StatusCode)
				}
			}
			if resp, body := do(t, cl, http.MethodGet, base+"/console/settings", nil, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) || strings.Contains(body, "call-timeout") {
				t.Errorf("GET settings: %d", resp.StatusCode)
			}
			if resp, body := do(t, cl, http.MethodPost, base+"/console/settings/reload", url.Values{}, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
				t.Errorf("POST reload: %d", resp.StatusCode)
			}
		})
	}
	c := browser(t)
	signIn(t, c, base, "ops")
	resp, body := do(t, c, http.MethodPost, base+"/console/settings/reload", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "another site") {
		t.Errorf("cross-site reload: %d", resp.StatusCode)
	}
	if n := reloads.Load(); n != 0 {
		t.Errorf("%d reloads ran", n)
	}
}
