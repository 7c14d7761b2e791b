package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/store"
)

// TestConsoleReloadsConfig: the console's Reload button of a real
// `toolbus serve --config` does what SIGHUP does: the token rate limit
// written into the file since the start takes effect, and the Settings
// page shows it from the file; the session secret shows masked. A bad
// file makes the reload fail with the file and line, and changes nothing.
func TestConsoleReloadsConfig(t *testing.T) {
	isolateEnv(t)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	const password = "ops-console-password"
	st, err := store.Open(ctx, data, store.StoreOptions{HashIterations: 1000, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AddUser(ctx, "ops", []byte(password)); err != nil {
		t.Fatal(err)
	}
	if err := st.SetUserAdmin(ctx, "ops", true); err != nil {
		t.Fatal(err)
	}
	token, _, err := st.CreateToken(ctx, store.TokenSpec{UserID: "ann"})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "toolbus.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(cfgFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	const secret = "a-secret-of-some-length"
	write("session-secret: " + secret + "\nlog-level: info\n")

	// serve, in this process, until the test ends.
	outR, outW := io.Pipe()
	serveCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(serveCtx, []string{"serve", "--config", cfgFile, "--data-dir", data, "--http-addr", "127.0.0.1:0",
			"--mqtt-addr", "127.0.0.1:0", "--oauth=false", "--log-level", "warn"}, strings.NewReader(""), outW, io.Discard)
		outW.Close()
	}()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not stop")
		}
	})
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	var base string
	for base == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("serve ended: %v", <-done)
			}
			if f := strings.Fields(l); len(f) > 1 && f[0] == "toolbus:" && strings.HasSuffix(f[1], "/api/v1/mcp") {
				base = strings.TrimSuffix(f[1], "/api/v1/mcp")
			}
		case <-ctx.Done():
			t.Fatal("serve did not print its address")
		}
	}

	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, form url.Values, bearer string) (int, string) {
		t.Helper()
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, err := http.NewRequestWithContext(ctx, method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Header.Set("Sec-Fetch-Site", "same-origin")
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if status, body := send(http.MethodPost, "/console/sign-in", url.Values{"username": {"ops"}, "password": {password}}, ""); status != http.StatusSeeOther {
		t.Fatalf("sign-in: %d\n%s", status, body)
	}
	status, page := send(http.MethodGet, "/console/settings", nil, "")
	if status != http.StatusOK || !strings.Contains(page, `id="reload-button"`) ||
		!strings.Contains(page, `<tr data-setting="session-secret" data-source="file"><td class="mono">session-secret</td><td class="mono setting-value">********</td>`) ||
		!strings.Contains(page, `<tr data-setting="rate-limit-token" data-source="default">`) || strings.Contains(page, secret) {
		t.Fatalf("settings page: %d\n%s", status, page)
	}
	for range 3 {
		if status, _ := send(http.MethodGet, "/api/v1/whoami", nil, token); status != http.StatusOK {
			t.Fatalf("whoami before the limit: %d", status)
		}
	}

	write("session-secret: " + secret + "\nlog-level: info\nrate-limit:\n  token: \"60:1\"\n")
	status, page = send(http.MethodPost, "/console/settings/reload", url.Values{}, "")
	if status != http.StatusOK || !strings.Contains(page, "Settings reloaded") ||
		!strings.Contains(page, `<tr data-setting="rate-limit-token" data-source="file"><td class="mono">rate-limit-token</td><td class="mono setting-value">60:1</td>`) {
		t.Fatalf("reload: %d\n%s", status, page)
	}
	// One request a minute, a burst of one: the second is refused.
	send(http.MethodGet, "/api/v1/whoami", nil, token)
	if status, _ := send(http.MethodGet, "/api/v1/whoami", nil, token); status != http.StatusTooManyRequests {
		t.Errorf("whoami after the reload: %d, want 429", status)
	}

	write("rate-limit:\n  token: fast\n")
	status, page = send(http.MethodPost, "/console/settings/reload", url.Values{}, "")
	if status != http.StatusUnprocessableEntity || !strings.Contains(page, "The reload failed") || !strings.Contains(page, cfgFile+":2") ||
		!strings.Contains(page, `<td class="mono setting-value">60:1</td>`) {
		t.Errorf("reload of a bad file: %d\n%s", status, page)
	}
}
