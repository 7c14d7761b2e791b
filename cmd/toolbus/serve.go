package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/internal/gctune"
	"github.com/toolbus/toolbus/internal/pahoconn"
	"github.com/toolbus/toolbus/internal/pprofserver"
	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/requester"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("serve", stderr)
	var cfg server.Config
	fs.StringVar(&cfg.HTTPAddr, "http-addr", "127.0.0.1:8080", "HTTP listen address of the gateway")
	fs.StringVar(&cfg.PublicURL, "public-url", "", "scheme://host[:port] as MCP clients reach the gateway (behind a proxy, say), named in its OAuth metadata and 401 challenges; default: each request's own Host")
	fs.StringVar(&cfg.TLSCertFile, "tls-cert-file", "", "serve HTTPS with this PEM certificate chain (with --tls-key-file); read again on SIGHUP, so a renewed certificate needs no restart")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	consoleOn := fs.Bool("console", true, "serve the operator console at /console/ on the HTTP listener; sign-in users with the admin role get in (toolbus user admin U on; docs/console.md)")
	fs.DurationVar(&cfg.Console.IdleTimeout, "console-idle-timeout", 30*time.Minute, "end a console session unused for this long")
	fs.DurationVar(&cfg.Console.MaxAge, "console-max-age", 12*time.Hour, "end a console session this long after sign-in, used or not")
	oauthOn := fs.Bool("oauth", true, "serve the built-in OAuth 2.1 authorization server at /oauth/, so that MCP clients with only the gateway's URL can sign a user in (users: toolbus user add); false: personal tokens only")
	fs.DurationVar(&cfg.OAuth.AccessTTL, "oauth-access-ttl", time.Hour, "lifetime of the access tokens the authorization server issues")
	fs.DurationVar(&cfg.OAuth.RefreshTTL, "oauth-refresh-ttl", 30*24*time.Hour, "how long an unused OAuth refresh token stays valid")
	fs.DurationVar(&cfg.OAuth.GrantMaxAge, "oauth-grant-max-age", 90*24*time.Hour, "how long a consent lasts, however often it is refreshed, before the user must sign in again (with --oidc-issuer: the longest a user removed at the provider keeps access)")
	fs.DurationVar(&cfg.OAuth.UnusedClientTTL, "oauth-unused-client-ttl", 24*time.Hour, "how long a client registered at /oauth/register is kept if no user consents to it (registration is open to anyone); one consented to once is kept")
	fs.IntVar(&cfg.OAuth.MaxUnusedClients, "oauth-max-unused-clients", oauth.DefaultMaxUnusedClients, "most clients registered through this process that no user has consented to; at the bound the oldest at least 10 minutes old are deleted, else registration answers 503 with Retry-After; at most 100 of them from one address (429 beyond); negative: no bound but --oauth-unused-client-ttl")
	fs.DurationVar(&cfg.OAuth.RefreshGrace, "oauth-refresh-grace", oauth.DefaultRefreshGrace, "how long the same client presenting its just-rotated refresh token again (a retry, concurrent refreshes) gets the same tokens instead of losing its grant; negative: none, every reuse revokes")
	fs.BoolVar(&cfg.OAuth.AllowPrivateClientMetadata, "oauth-allow-private-client-metadata", false, "fetch Client ID Metadata Documents from loopback and private addresses too, over http as well (tests, closed networks)")
	trustedProxies := fs.String("trusted-proxies", "", "comma-separated addresses or CIDRs of reverse proxies whose X-Forwarded-For names the client's address, for the OAuth and console sign-in rate limits, the refresh grace, the audit log's refused requests and console records (default: none, the connection's peer is the client)")
	fs.IntVar(&cfg.OAuth.RateLimit, "oauth-rate-limit", 30, "sign-in attempts (OAuth and console), token requests and registrations allowed per client address (and sign-ins per user) per minute; negative: no limit")
	fs.StringVar(&cfg.OAuth.OIDC.Issuer, "oidc-issuer", "", "sign users in at this OpenID provider (its issuer URL) instead of with toolbus passwords; register toolbus there with the redirect URI <public URL>/oauth/callback")
	fs.StringVar(&cfg.OAuth.OIDC.ClientID, "oidc-client-id", "", "toolbus's client ID at the --oidc-issuer provider")
	fs.StringVar(&cfg.OAuth.OIDC.ClientSecret, "oidc-client-secret", "", "toolbus's client secret there (prefer TOOLBUS_OIDC_CLIENT_SECRET: a flag shows in ps)")
	oidcScopes := fs.String("oidc-scopes", "openid,email,profile", "comma-separated scopes asked of the OpenID provider")
	fs.StringVar(&cfg.OAuth.OIDC.UserClaim, "oidc-user-claim", "sub", "claim whose value becomes the toolbus user ID (characters outside A-Z a-z 0-9 _ - become _)")
	fs.StringVar(&cfg.OAuth.OIDC.UserPrefix, "oidc-user-prefix", "", "with --oidc-issuer: put before every user ID the provider's claims make (e.g. sso-), a prefix to keep for them (name no personal token's user or toolbus user with it); at most 32 of A-Z a-z 0-9 _ -")
	fs.StringVar(&cfg.OAuth.OIDC.GroupsClaim, "oidc-groups-claim", "groups", "claim that lists the user's groups")
	oidcAdminGroups := fs.String("oidc-admin-groups", "", "members of these groups of the OpenID provider (comma-separated) sign in to the operator console; none: the console offers no sign-in at the provider")
	oidcGroupScopes := fs.String("oidc-group-scopes", "", "which scopes each group's members may grant, GROUP=SCOPE,SCOPE;GROUP=SCOPE (e.g. mcp-users=tools:list,tools:call;auditors=tools:list); users in none cannot sign in; default: anyone the provider signs in may grant every scope")
	fs.StringVar(&cfg.MQTTAddr, "mqtt-addr", "127.0.0.1:1883", "TCP listen address of the embedded MQTT broker")
	fs.StringVar(&cfg.MQTTWSAddr, "mqtt-ws-addr", "", "listen address of the embedded MQTT broker for MQTT over WebSocket (ws://HOST:PORT/mqtt; put a TLS proxy in front for wss://); off by default")
	fs.StringVar(&cfg.DataDir, "data-dir", "./data", "directory of the store")
	fs.StringVar(&cfg.StoreURL, "store-url", "", "shared PostgreSQL store for several replicas, postgres://user:password@host:port/db (prefer TOOLBUS_STORE_URL: a flag shows in ps); default: SQLite in --data-dir (see docs/scale-out.md)")
	fs.StringVar(&cfg.PlatformID, "platform-id", "", "this gateway's name on the bus (default: random per start)")
	fs.StringVar(&cfg.BrokerURL, "broker-url", "", "external MQTT broker, tcp://host:port or ssl://host:port (several, comma-separated, are tried in order: the nodes of a cluster): no embedded broker (see docs/external-broker.md)")
	fs.StringVar(&cfg.BrokerUsername, "broker-username", "", "username on the external broker (an identity of role platform)")
	fs.StringVar(&cfg.BrokerPassword, "broker-password", "", "password on the external broker (prefer TOOLBUS_BROKER_PASSWORD: a flag shows in ps)")
	fs.StringVar(&cfg.BrokerClientID, "broker-client-id", "", "MQTT client ID on the external broker (default: toolbus-<platform id>, unique per replica)")
	fs.DurationVar(&cfg.BrokerConnectTimeout, "broker-connect-timeout", 0, "give up starting when the first connection to the external broker has failed for this long (0: keep trying, with backoff, until stopped)")
	fs.BoolVar(&cfg.OneReplySubscription, "one-reply-subscription", false, "subscribe one filter for every reply to this gateway on the external broker, instead of one per context: for NATS, where each subscription rewrites the client's session in JetStream (see docs/distributed.md)")
	brokerCA := fs.String("broker-ca-file", "", "PEM CA certificates that verify an ssl:// broker (default: the system's)")
	brokerCert := fs.String("broker-cert-file", "", "PEM client certificate for an ssl:// broker (with --broker-key-file)")
	brokerKey := fs.String("broker-key-file", "", "PEM private key of --broker-cert-file")
	fs.DurationVar(&cfg.CallTimeout, "call-timeout", 30*time.Second, "deadline of an expert-agent tool call")
	fs.DurationVar(&cfg.ListTimeout, "list-timeout", 5*time.Second, "deadline of an expert-agent tool list")
	fs.StringVar(&cfg.AgentToolNames, "agent-tool-names", gateway.NamesQualifyOnCollision, "how agent tools are named: qualify-on-collision (a tool keeps its plain name while its agent is online; an agent that comes later with the same name gets <agent>.<tool>) or always-qualify (every agent tool is <agent>.<tool>)")
	fs.BoolVar(&cfg.AddressAgentInstances, "address-agent-instances", false, "send each request to one instance of the agent, chosen in turn from presence, instead of to its pool's shared subscription: for brokers without $share (NATS, RabbitMQ)")
	fs.DurationVar(&cfg.SuspectAfter, "suspect-after", 2*time.Second, "with --address-agent-instances: an instance that neither answers nor claims a call sent to it for this long gets no new calls while its agent has other instances, until it is heard from (one whose node died sends no Will); negative: never")
	fs.IntVar(&cfg.MaxContexts, "max-contexts", 10000, "most per-context response subscriptions kept (LRU)")
	fs.DurationVar(&cfg.ContextTTL, "context-ttl", 24*time.Hour, "idle time after which a context's subscription is dropped")
	fs.StringVar(&cfg.SessionSecret, "session-secret", "", "secret that signs MCP session IDs; replicas that share it accept each other's sessions (default: random per start)")
	fs.DurationVar(&cfg.SessionTTL, "session-ttl", 24*time.Hour, "idle time after which an MCP session ends")
	fs.DurationVar(&cfg.EndedSessionsCacheTTL, "ended-sessions-cache-ttl", time.Second, "how long a replica trusts the store's \"session not ended\" per session: how late it may serve a session another replica ended (negative: ask on every request)")
	fs.DurationVar(&cfg.ToolListTTL, "tool-list-ttl", 30*time.Second, "how long an expert agent's tool list is reused per context")
	fs.IntVar(&cfg.MaxSessionsPerToken, "max-sessions-per-token", gateway.DefaultMaxSessionsPerToken, "live MCP sessions of one token on this replica; past it, initialize ends the token's least recently used session (its client gets 404 and initializes anew); negative: no bound")
	fs.IntVar(&cfg.MaxSessionsPerUser, "max-sessions-per-user", gateway.DefaultMaxSessionsPerUser, "live MCP sessions of one user, all tokens together, on this replica; past it, initialize ends the same token's least recently used session, or is refused (429, Retry-After) when that token has none; negative: no bound")
	fs.IntVar(&cfg.MaxAgentTools, "max-agent-tools", gateway.DefaultMaxAgentTools, "most tools kept of one expert agent's tools/list answer per context; the rest are logged once per answer and counted (toolbus_agent_tools_left_out_total)")
	fs.IntVar(&cfg.MaxAgentListBytes, "max-agent-list-bytes", gateway.DefaultMaxAgentListBytes, "most bytes kept of one expert agent's tools/list answer per context, all pages together; no further page is asked past it")
	fs.IntVar(&cfg.MaxToolBytes, "max-tool-bytes", gateway.DefaultMaxToolBytes, "largest expert-agent tool definition listed, in bytes; larger ones are left out")
	fs.DurationVar(&cfg.ListChangedInterval, "list-changed-interval", gateway.DefaultListChangedInterval, "least time between two notifications/tools/list_changed to a listening client (a burst of agent changes is one at once and one when it ends); negative: every change at once")
	fs.IntVar(&cfg.MaxAgentInstances, "max-agent-instances", requester.DefaultMaxInstancesPerAgent, "most instances of one agent that the gateway keeps from presence; past it, an offline one is forgotten, and while all are online a new one is not admitted; negative: no bound")
	fs.Int64Var(&cfg.MaxBodyBytes, "max-body-bytes", 4<<20, "largest MCP request body accepted (413 above)")
	fs.DurationVar(&cfg.ReadHeaderTimeout, "http-read-header-timeout", 10*time.Second, "how long a client may take to send a request's headers (slow clients are disconnected)")
	fs.DurationVar(&cfg.ReadTimeout, "http-read-timeout", 60*time.Second, "how long a client may take to send a whole request, headers and body (408 when the body is late); tool calls may run longer")
	allowedHosts := fs.String("allowed-hosts", "", "comma-separated Host names the gateway answers to besides loopback ones (DNS rebinding protection)")
	allowedOrigins := fs.String("allowed-origins", "", "comma-separated browser origins allowed to call the MCP endpoint")
	pprofAddr := fs.String("pprof-addr", "", "serve Go's net/http/pprof profiles on this address (e.g. 127.0.0.1:6060); off by default")
	var gcFloorMiB int
	gctune.FlagVar(fs, &gcFloorMiB)
	shutdownTimeout := fs.Duration("shutdown-timeout", 30*time.Second, "how long shutdown waits for in-flight requests")
	for _, f := range rateLimitFlags {
		fs.String(f.name, "", f.usage)
	}
	auditRetention := addAuditFlags(fs, &cfg.Audit) // audit.go
	fs.String(configFlag, "", "YAML config file: keys are these flags' names (nested keys join with -), beneath flags and TOOLBUS_* variables; see docs/config.md")
	checkOnly := fs.Bool(checkConfigFlag, false, "check the settings (flags, environment, --config file) and exit without starting")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	logFormat := fs.String("log-format", "json", "log format: json or text")
	sources, err := parseCommandFlags(fs, args)
	if err != nil {
		return err
	}
	log, err := newLogger(*logLevel, *logFormat, stderr)
	if err != nil {
		return sources.located(err)
	}
	cfg.Logger = log
	cfg.OAuth.Disabled = !*oauthOn
	cfg.Console.Disabled = !*consoleOn
	cfg.OAuth.OIDC.Scopes = splitList(*oidcScopes)
	cfg.Console.OpenIDAdminGroups = splitList(*oidcAdminGroups)
	if cfg.OAuth.TrustedProxies, err = parsePrefixes(*trustedProxies); err != nil {
		return sources.located(err)
	}
	if cfg.OAuth.OIDC.GroupScopes, err = parseGroupScopes(*oidcGroupScopes); err != nil {
		return sources.located(err)
	}
	if cfg.RateLimits, err = parseRateLimits("--", func(name string) string { return fs.Lookup(name).Value.String() }); err != nil {
		return sources.located(err)
	}
	if err := auditRetention(); err != nil {
		return sources.located(err)
	}
	cfg.AllowedHosts = splitList(*allowedHosts)
	cfg.AllowedOrigins = splitList(*allowedOrigins)
	if cfg.BrokerTLS, err = brokerTLS(cfg.BrokerURL, *brokerCA, *brokerCert, *brokerKey); err != nil {
		return sources.located(err)
	}

	live := &liveSettings{list: effectiveSettings(fs, sources)}
	cfg.Settings = live.get
	rl := &reloader{fs: fs, src: sources, live: live, log: log}
	cfg.Console.Reload = rl.reload // the console's reload button: what SIGHUP does
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	rl.srv = srv
	gcFloor, err := gctune.FloorFromMiB(gcFloorMiB)
	if err != nil {
		return err
	}
	if *checkOnly {
		if cfg.StoreURL == "" {
			if err := server.CheckDataDir(cfg.DataDir); err != nil {
				return sources.located(fmt.Errorf("--data-dir: %w", err))
			}
		}
		fmt.Fprintln(stdout, "toolbus: settings ok")
		return nil
	}
	gc := gctune.Start(gctune.Options{Floor: gcFloor, Logger: log.WithField("component", "gctune")})
	defer gc.Close()
	if *pprofAddr != "" {
		stopPprof, err := pprofserver.Serve(*pprofAddr, log)
		if err != nil {
			return err
		}
		defer stopPprof()
	}
	if err := srv.Start(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, context.Canceled) {
			// Stopped while it waited for its broker: a requested stop.
			log.Info("stopped before the start was complete")
			return nil
		}
		return err
	}
	mqtt := cfg.BrokerURL
	if a := srv.MQTTAddr(); a != nil {
		mqtt = "mqtt://" + a.String()
	}
	// SIGHUP is caught from before the line that tells the gateway is up:
	// one sent right after it must reload, not kill the process.
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	// The hint before the address line: scripts wait for that one.
	firstTokenHint(ctx, srv, cfg, stdout)
	fmt.Fprintf(stdout, "toolbus: %s/api/v1/mcp  %s  platform-id %s\n", srv.BaseURL(), mqtt, srv.PlatformID())
	serveUntilDone(ctx, hup, rl)
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *shutdownTimeout)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// splitList splits a comma-separated flag value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// brokerTLS builds the TLS settings of an ssl:// external broker from the
// --broker-*-file flags; nil when none is given (Go's defaults).
func brokerTLS(brokerURL, caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" && keyFile == "" {
		return nil, nil
	}
	for _, u := range pahoconn.SplitURLs(brokerURL) {
		if !strings.HasPrefix(u, "ssl://") && !strings.HasPrefix(u, "wss://") {
			return nil, errors.New("--broker-ca-file, --broker-cert-file and --broker-key-file need an ssl:// --broker-url")
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--broker-cert-file and --broker-key-file go together")
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--broker-ca-file: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--broker-ca-file %s: no PEM certificate in it", caFile)
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--broker-cert-file/--broker-key-file: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// firstTokenHint tells a fresh install how to get in: with no token in the
// store yet, nothing can call the endpoint, and nothing else says so. For a
// PostgreSQL store the command names the store through TOOLBUS_STORE_URL,
// never the URL itself: it holds a password.
func firstTokenHint(ctx context.Context, srv *server.Server, cfg server.Config, stdout io.Writer) {
	toks, err := srv.Store().ListTokens(ctx, "")
	if err != nil || len(toks) > 0 {
		return
	}
	where := "--data-dir " + cfg.DataDir
	if cfg.StoreURL != "" {
		where = `--store-url "$TOOLBUS_STORE_URL"`
	}
	fmt.Fprintf(stdout, "toolbus: no token yet; create the first: toolbus token create %s --user YOU --scopes tools:list,tools:call,admin\n", where)
}

// parseGroupScopes reads --oidc-group-scopes: GROUP=SCOPE,SCOPE;GROUP=...
// ("" means nil: no group limits).
func parseGroupScopes(s string) (map[string][]string, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	m := map[string][]string{}
	for _, part := range strings.Split(s, ";") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		group, scopes, ok := strings.Cut(part, "=")
		group = strings.TrimSpace(group)
		if !ok || group == "" {
			return nil, fmt.Errorf("--oidc-group-scopes: %q: want GROUP=SCOPE,SCOPE", part)
		}
		list := splitList(scopes)
		for _, sc := range list {
			if err := store.ValidateScope(sc); err != nil {
				return nil, fmt.Errorf("--oidc-group-scopes: group %s: %w", group, err)
			}
		}
		m[group] = append(m[group], list...)
	}
	return m, nil
}

// parsePrefixes reads --trusted-proxies: addresses or CIDRs,
// comma-separated.
func parsePrefixes(s string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for _, f := range splitList(s) {
		if p, err := netip.ParsePrefix(f); err == nil {
			ps = append(ps, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("--trusted-proxies: %q is neither an address nor a CIDR", f)
		}
		ps = append(ps, netip.PrefixFrom(a, a.BitLen()))
	}
	return ps, nil
}
