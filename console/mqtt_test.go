package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// mqttDone is the page's Done line (what an action did), or "".
func mqttDone(body string) string {
	m := regexp.MustCompile(`<p class="done" role="status">([^<]*)</p>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

// mqttMessage is the page's Message line (what went wrong), or "".
func mqttMessage(body string) string {
	m := regexp.MustCompile(`<p class="message" role="alert">([^<]*)</p>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return html.UnescapeString(m[1])
}

var mqttSecretRE = regexp.MustCompile(`<p class="secret" id="new-identity-password" data-identity="([^"]*)">([^<]*)</p>`)

// TestConsoleIdentities: the identities page lists the identities with
// their connected clients (embedded broker); add (generated password
// shown once in the answer, typed one checked for length), disable (the
// agent is disconnected at once and the Done line counts it, audited as
// the operator through the console), enable, new password, remove.
func TestConsoleIdentities(t *testing.T) {
	cfg := server.Config{}
	cfg.Audit.FlushInterval = 20 * time.Millisecond
	srv, base := startConsoleWith(t, cfg)
	startAgent(t, srv, "weather", mcp.Tool{Name: "forecast", Description: "The forecast."})
	c := browser(t)
	signIn(t, c, base, "ops")

	resp, body := do(t, c, http.MethodGet, base+"/console/identities", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-identity="weather" data-role="expert-agent" data-state="enabled" data-clients="1"`) ||
		!strings.Contains(body, "weather-1") || strings.Contains(body, `id="external-broker"`) {
		t.Fatalf("identities page: %d\n%s", resp.StatusCode, body)
	}

	// Add with a generated password: shown once, in this answer only.
	resp, body = do(t, c, http.MethodPost, base+"/console/identities", url.Values{"username": {"sensor"}, "role": {"client"}, "password_mode": {"generate"}}, nil)
	m := mqttSecretRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || mqttDone(body) != "Added MQTT identity sensor (role client)." || m == nil || m[1] != "sensor" || len(m[2]) != 32 {
		t.Fatalf("add sensor: %d %q %q\n%s", resp.StatusCode, mqttDone(body), m, body)
	}
	if resp.Header.Get("Location") != "" {
		t.Fatalf("add answered a redirect")
	}
	if _, err := srv.Store().Authenticate(ctx(t), "sensor", []byte(m[2])); err != nil {
		t.Fatalf("the generated password does not log in: %v", err)
	}
	if _, again := do(t, c, http.MethodGet, base+"/console/identities", nil, nil); strings.Contains(again, m[2]) {
		t.Fatal("the generated password is shown again")
	}
	// A typed password: too short is the model's message; none at all
	// with "type one" is the page's.
	resp, body = do(t, c, http.MethodPost, base+"/console/identities", url.Values{"username": {"short"}, "role": {"client"}, "password_mode": {"type"}, "password": {"short"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || mqttMessage(body) != "invalid request: password of 5 characters: at least 12" || !strings.Contains(body, `value="short"`) {
		t.Fatalf("short password: %d %q", resp.StatusCode, mqttMessage(body))
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/identities", url.Values{"username": {"short"}, "role": {"client"}, "password_mode": {"type"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(mqttMessage(body), "at least 12 characters") {
		t.Fatalf("no typed password: %d %q", resp.StatusCode, mqttMessage(body))
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/identities", url.Values{"username": {"typed"}, "role": {"platform"}, "password_mode": {"type"}, "password": {"a-typed-password-1"}}, nil)
	if resp.StatusCode != http.StatusOK || mqttSecretRE.MatchString(body) {
		t.Fatalf("typed password: %d %q", resp.StatusCode, mqttDone(body))
	}
	if _, err := srv.Store().Authenticate(ctx(t), "typed", []byte("a-typed-password-1")); err != nil {
		t.Fatalf("the typed password does not log in: %v", err)
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/identities", url.Values{"username": {"x"}, "role": {"boss"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(mqttMessage(body), `unknown role "boss" (want platform, expert-agent or client)`) {
		t.Fatalf("unknown role: %d %q", resp.StatusCode, mqttMessage(body))
	}

	// Disable: the agent is disconnected at once.
	resp, body = do(t, c, http.MethodPost, base+"/console/identities/weather/disable", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || mqttDone(body) != "Disabled MQTT identity weather; disconnected 1 client." ||
		!strings.Contains(body, `data-identity="weather" data-role="expert-agent" data-state="disabled"`) {
		t.Fatalf("disable: %d %q\n%s", resp.StatusCode, mqttDone(body), body)
	}
	testenv.Poll(t, 10*time.Second, "weather offline", func() bool {
		for _, s := range srv.Requester().Agents() {
			if s.Agent == "weather" && s.Online {
				return false
			}
		}
		return true
	})
	e := adminAudit(t, srv, "of the disable", func(e store.AuditEvent) bool { return e.Action == "identity.disable" })
	if e.UserID != "ops" || e.Source != admin.DoorConsole || e.Target != "identity weather" || e.Outcome != "ok" {
		t.Errorf("audit of the disable: %+v", e)
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/identities/weather/enable", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || mqttDone(body) != "Enabled MQTT identity weather." {
		t.Fatalf("enable: %d %q", resp.StatusCode, mqttDone(body))
	}

	// New password: generated (shown once), connected clients stay.
	resp, body = do(t, c, http.MethodPost, base+"/console/identities/sensor/password", url.Values{}, nil)
	m2 := mqttSecretRE.FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || m2 == nil || m2[2] == m[2] || !strings.HasPrefix(mqttDone(body), "Changed the password of MQTT identity sensor.") {
		t.Fatalf("new password: %d %q", resp.StatusCode, mqttDone(body))
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/identities/sensor/password", url.Values{"password": {"too-short"}, "disconnect": {"on"}}, nil)
	if resp.StatusCode != http.StatusBadRequest || mqttMessage(body) != "invalid request: password of 9 characters: at least 12" {
		t.Fatalf("short new password: %d %q", resp.StatusCode, mqttMessage(body))
	}

	resp, body = do(t, c, http.MethodPost, base+"/console/identities/sensor/remove", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || mqttDone(body) != "Removed MQTT identity sensor and its ACL rules; disconnected 0 clients." || strings.Contains(body, `data-identity="sensor"`) {
		t.Fatalf("remove: %d %q", resp.StatusCode, mqttDone(body))
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/identities/nobody/disable", url.Values{}, nil)
	if resp.StatusCode != http.StatusNotFound || mqttMessage(body) == "" {
		t.Fatalf("disable an unknown identity: %d %q", resp.StatusCode, mqttMessage(body))
	}
}

// TestConsoleRules: the rules page lists the built-in rules without a
// remove button; a rule is refused with the CLI's messages (the model's
// own: a bad filter, a reserved tree, an unknown identity; the flags'
// checks: who, access and filter given), added, listed and removed; a
// built-in rule cannot be removed.
func TestConsoleRules(t *testing.T) {
	srv, base := startConsole(t)
	if _, err := srv.Store().AddIdentity(ctx(t), "sensor", "client", []byte("sensor-password-1")); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	signIn(t, c, base, "ops")
	resp, body := do(t, c, http.MethodGet, base+"/console/rules", nil, nil)
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `data-rule="builtin-agent-req" data-kind="builtin"`) ||
		strings.Contains(body, `/console/rules/builtin-`) || !strings.Contains(body, `id="no-operator-rules"`) || !strings.Contains(body, `<option value="sensor">`) {
		t.Fatalf("rules page: %d\n%s", resp.StatusCode, body)
	}
	for _, tc := range []struct {
		form   url.Values
		status int
		msg    string
	}{
		{url.Values{"who": {"sensor"}, "access": {"read"}, "filter": {"a/#/b"}}, 400, `invalid rule: "a/#/b" is not a valid MQTT topic filter`},
		{url.Values{"who": {"*"}, "access": {"write"}, "filter": {"ff/#"}}, 400, `invalid rule: "ff/#" could match topics under ff/v2/ or ff/v1/mcp/, which only built-in rules govern`},
		{url.Values{"who": {"*"}, "access": {"write"}, "filter": {"$SYS/x"}}, 400, `invalid rule: "$SYS/x": filters starting with '$' are not allowed`},
		{url.Values{"who": {"ghost"}, "access": {"read"}, "filter": {"a/b"}}, 404, `rule for identity ghost: not found`},
		{url.Values{"who": {"sensor"}, "access": {"all"}, "filter": {"a/b"}}, 400, `invalid request: unknown access "all" (want read, write or readwrite)`},
		{url.Values{"access": {"read"}, "filter": {"a/b"}}, 400, `acl rule add: give an identity (--username NAME) or every identity (--everyone).`},
		{url.Values{"who": {"sensor"}, "access": {"read"}}, 400, `acl rule add: access and filter are required (--access, --filter).`},
	} {
		resp, body := do(t, c, http.MethodPost, base+"/console/rules", tc.form, nil)
		if resp.StatusCode != tc.status || mqttMessage(body) != tc.msg {
			t.Errorf("add %v: %d %q, want %d %q", tc.form, resp.StatusCode, mqttMessage(body), tc.status, tc.msg)
		}
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/rules", url.Values{"who": {"sensor"}, "access": {"readwrite"}, "filter": {"sensors/+/t"}}, nil)
	id := regexp.MustCompile(`data-rule="(\d+)" data-kind="operator"`).FindStringSubmatch(body)
	if resp.StatusCode != http.StatusOK || id == nil || mqttDone(body) != "Added rule "+id[1]+": sensor readwrite sensors/+/t; the broker allows what it covers from now on." {
		t.Fatalf("add: %d %q\n%s", resp.StatusCode, mqttDone(body), body)
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/rules/"+id[1]+"/remove", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || mqttDone(body) != "Removed rule "+id[1]+"; the broker refuses what it alone allowed from now on." || strings.Contains(body, `data-rule="`+id[1]+`"`) {
		t.Fatalf("remove: %d %q", resp.StatusCode, mqttDone(body))
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/rules/builtin-agent-req/remove", url.Values{}, nil)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(mqttMessage(body), "is part of the ff/v2 contract, granted by role; it cannot be removed") {
		t.Fatalf("remove a built-in rule: %d %q", resp.StatusCode, mqttMessage(body))
	}
}

// TestConsoleMQTTRefusals: without a session the pages are the sign-in
// form; a non-admin gets no session; a cross-site form post is refused
// (403) and changes nothing.
func TestConsoleMQTTRefusals(t *testing.T) {
	srv, base := startConsole(t)
	if _, err := srv.Store().AddIdentity(ctx(t), "sensor", "client", []byte("sensor-password-1")); err != nil {
		t.Fatal(err)
	}
	anon := browser(t)
	dev := browser(t)
	if resp := signIn(t, dev, base, "dev"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("non-admin sign-in: %d", resp.StatusCode)
	}
	for _, c := range []*http.Client{anon, dev} {
		for _, p := range []string{"/console/identities", "/console/rules"} {
			if resp, body := do(t, c, http.MethodGet, base+p, nil, nil); resp.StatusCode != http.StatusUnauthorized || !strings.Contains(body, `name="password"`) {
				t.Errorf("GET %s: %d, want 401 and the sign-in form", p, resp.StatusCode)
			}
		}
		for _, p := range []string{"/console/identities/sensor/disable", "/console/rules"} {
			if resp, _ := do(t, c, http.MethodPost, base+p, url.Values{"who": {"*"}, "access": {"read"}, "filter": {"x"}}, nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST %s: %d, want 401", p, resp.StatusCode)
			}
		}
	}
	ops := browser(t)
	signIn(t, ops, base, "ops")
	resp, body := do(t, ops, http.MethodPost, base+"/console/identities/sensor/disable", url.Values{}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "another site") {
		t.Fatalf("cross-site disable: %d", resp.StatusCode)
	}
	resp, body = do(t, ops, http.MethodPost, base+"/console/rules", url.Values{"who": {"*"}, "access": {"read"}, "filter": {"x"}}, map[string]string{"Sec-Fetch-Site": "cross-site"})
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "another site") {
		t.Fatalf("cross-site rule add: %d", resp.StatusCode)
	}
	if id, err := srv.Store().Identity(ctx(t), "sensor"); err != nil || id.Disabled {
		t.Fatalf("after the cross-site post: %+v %v", id, err)
	}
	if rules, err := srv.Store().ListRules(ctx(t)); err != nil || len(rules) != 0 {
		t.Fatalf("after the cross-site post: rules %+v %v", rules, err)
	}
}

// TestConsoleMQTTExternalBanner: with an external broker (here another
// embedded broker, testenv's) both pages show the banner with the export
// command for the gateway's own data directory and the brokers' reload;
// a disable is stored and disconnects nobody, and the page says so; the
// connected clients are not visible.
func TestConsoleMQTTExternalBanner(t *testing.T) {
	ext := testenv.StartBroker(t)
	dir := t.TempDir()
	cfg := server.Config{DataDir: dir, BrokerURL: ext.URL, BrokerUsername: ext.PlatformUser, BrokerPassword: ext.PlatformPassword,
		Settings: func() []admin.Setting {
			return []admin.Setting{{Name: "data-dir", Value: dir, Source: "flag"}, {Name: "store-url", Source: "default"}}
		}}
	srv, base := startConsoleWith(t, cfg)
	if _, err := srv.Store().AddIdentity(ctx(t), "sensor", "client", []byte("sensor-password-1")); err != nil {
		t.Fatal(err)
	}
	c := browser(t)
	signIn(t, c, base, "ops")
	mosquitto := "toolbus acl export --data-dir " + dir + " --out /etc/mosquitto/toolbus"
	nats := "toolbus acl export --format nats --data-dir " + dir + " --out /etc/nats"
	for _, p := range []string{"/console/identities", "/console/rules"} {
		resp, body := do(t, c, http.MethodGet, base+p, nil, nil)
		if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="external-broker"`) || !strings.Contains(body, ext.URL) ||
			!strings.Contains(body, `<code class="mono" id="export-mosquitto">`+mosquitto+`</code>`) ||
			!strings.Contains(body, `<code class="mono" id="export-nats">`+nats+`</code>`) ||
			!strings.Contains(body, "systemctl reload mosquitto") || !strings.Contains(body, "nats-server --signal reload") {
			t.Fatalf("GET %s with an external broker: %d\n%s", p, resp.StatusCode, body)
		}
	}
	resp, body := do(t, c, http.MethodPost, base+"/console/identities/sensor/disable", url.Values{}, nil)
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(mqttDone(body), "Disabled MQTT identity sensor in the store; nobody was disconnected") ||
		!strings.Contains(body, `<span class="muted">not visible</span>`) || !strings.Contains(body, "Mosquitto keeps clients connected even then") {
		t.Fatalf("disable with an external broker: %d %q\n%s", resp.StatusCode, mqttDone(body), body)
	}
	resp, body = do(t, c, http.MethodPost, base+"/console/rules", url.Values{"who": {"*"}, "access": {"read"}, "filter": {"sensors/#"}}, nil)
	if resp.StatusCode != http.StatusOK || !strings.HasSuffix(mqttDone(body), "read sensors/# in the store; the external broker knows nothing of it until you export and reload it (see above).") {
		t.Fatalf("rule with an external broker: %d %q", resp.StatusCode, mqttDone(body))
	}
}
