package oauth_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/oauthex"
	"github.com/sirupsen/logrus"
	"golang.org/x/oauth2"

	"github.com/toolbus/toolbus/oauth"
	"github.com/toolbus/toolbus/store"
)

// syncBuffer is a log destination for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestRefusedAuthorizeFlood: refused authorization requests count against
// the address's rate limit, so a flood soon gets 429; what each refusal
// leaves in the log and the audit is short whatever the request held.
func TestRefusedAuthorizeFlood(t *testing.T) {
	const limit, flood = 10, 60
	var logs syncBuffer
	lg := logrus.New()
	lg.SetOutput(&logs)
	e := newEnv(t, func(o *oauth.Options) { o.RateLimit = limit; o.Logger = logrus.NewEntry(lg) })
	huge := strings.Repeat("x", 16<<10)
	statuses := map[int]int{}
	for i := range flood {
		q := url.Values{"client_id": {fmt.Sprintf("tbc_%d%s", i, huge)}, "redirect_uri": {"https://e.example/" + huge},
			"response_type": {"code"}}
		resp, err := http.Get(e.srv.URL + oauth.AuthorizePath + "?" + q.Encode())
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if len(body) > 4<<10 {
			t.Fatalf("refusal page of %d bytes: it echoes the request", len(body))
		}
		if resp.StatusCode == http.StatusTooManyRequests && resp.Header.Get("Retry-After") == "" {
			t.Fatal("429 without Retry-After")
		}
	}
	if statuses[http.StatusBadRequest] != limit || statuses[http.StatusTooManyRequests] != flood-limit {
		t.Fatalf("statuses %v, want %d × 400 then 429", statuses, limit)
	}
	e.mu.Lock()
	events := append([]store.AuditEvent(nil), e.events...)
	e.mu.Unlock()
	if len(events) != flood {
		t.Fatalf("%d audit records, want one per request (the audit log aggregates them)", len(events))
	}
	for _, ev := range events {
		if len(ev.ClientID) > 128 || len(ev.Reason) > 256 || len(ev.Target) > 128 || ev.Source != "127.0.0.1" {
			t.Fatalf("record with client_id of %d bytes, reason of %d, source %q: want them clipped and the address",
				len(ev.ClientID), len(ev.Reason), ev.Source)
		}
	}
	out := logs.String()
	if len(out) > 32<<10 {
		t.Fatalf("%d bytes of log for %d refusals", len(out), flood)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if len(line) > 1024 {
			t.Fatalf("log line of %d bytes: %.200s", len(line), line)
		}
	}
}

// TestRefusalLogLinesSparse: refusals beyond a few a second are counted,
// not logged, and the next line says how many were left out.
func TestRefusalLogLinesSparse(t *testing.T) {
	var logs syncBuffer
	lg := logrus.New()
	lg.SetOutput(&logs)
	e := newEnv(t, func(o *oauth.Options) { o.RateLimit = -1; o.Logger = logrus.NewEntry(lg) })
	const flood = 200
	for range flood {
		resp, err := http.PostForm(e.srv.URL+oauth.TokenPath, url.Values{"grant_type": {"refresh_token"}, "client_id": {"tbc_none"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if n := strings.Count(logs.String(), "oauth refresh"); n >= flood || n == 0 {
		t.Fatalf("%d log lines for %d refusals, want a bounded few", n, flood)
	}
}

// TestRegistrationBounds: what one registration may leave in the store.
func TestRegistrationBounds(t *testing.T) {
	e := newEnv(t, func(o *oauth.Options) { o.RateLimit = -1 })
	uris := func(n, size int) []string {
		var out []string
		for i := range n {
			u := fmt.Sprintf("https://app.example/%d/", i)
			out = append(out, u+strings.Repeat("p", size-len(u)))
		}
		return out
	}
	for _, tc := range []struct {
		name string
		uris []string
		cn   string
		want int
	}{
		{"at the bounds", uris(oauth.DefaultMaxRedirectURIs, oauth.DefaultMaxRedirectURILen), strings.Repeat("n", oauth.DefaultMaxClientNameLen), http.StatusCreated},
		{"one redirect URI too many", uris(oauth.DefaultMaxRedirectURIs+1, 40), "c", http.StatusBadRequest},
		{"a redirect URI too long", uris(1, oauth.DefaultMaxRedirectURILen+1), "c", http.StatusBadRequest},
		{"a name too long", uris(1, 40), strings.Repeat("n", oauth.DefaultMaxClientNameLen+1), http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body, _ := json.Marshal(map[string]any{"redirect_uris": tc.uris, "client_name": tc.cn, "token_endpoint_auth_method": "none"})
			resp, err := http.Post(e.srv.URL+oauth.RegisterPath, "application/json", bytes.NewReader(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("%s, want %d\n%s", resp.Status, tc.want, b)
			}
		})
	}
}

// registerRaw posts a registration and returns the answer's status and body.
func registerRaw(t *testing.T, e *env) (int, http.Header, map[string]any) {
	t.Helper()
	return registerFrom(t, e, "")
}

// registerFrom is registerRaw from the address from as X-Forwarded-For
// says ("": none).
func registerFrom(t *testing.T, e *env, from string) (int, http.Header, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+oauth.RegisterPath,
		strings.NewReader(`{"redirect_uris":["http://127.0.0.1/cb"],"token_endpoint_auth_method":"none"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if from != "" {
		req.Header.Set("X-Forwarded-For", from)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, resp.Header, m
}

// TestUnusedClientsCapped: beyond MaxUnusedClients unused registrations
// none younger than MinUnusedClientAge is deleted: registration is
// refused with 503 and Retry-After until a user consents to one.
func TestUnusedClientsCapped(t *testing.T) {
	const cap = 3
	e := newEnv(t, func(o *oauth.Options) { o.RateLimit = -1; o.MaxUnusedClients = cap })
	var ids []string
	for range cap {
		st, _, m := registerRaw(t, e)
		if st != http.StatusCreated {
			t.Fatalf("registration under the cap: %d %v", st, m)
		}
		ids = append(ids, m["client_id"].(string))
	}
	st, hdr, m := registerRaw(t, e)
	if st != http.StatusServiceUnavailable || m["error"] != "temporarily_unavailable" || hdr.Get("Retry-After") == "" {
		t.Fatalf("registration over the cap: %d %v (Retry-After %q), want 503 temporarily_unavailable with Retry-After", st, m, hdr.Get("Retry-After"))
	}
	if !e.audited("register", "refused") {
		t.Fatal("the refusal is not audited")
	}
	// A consent makes a client used: it no longer counts.
	const redirect = "http://127.0.0.1/cb"
	conf := e.config(ids[0], redirect)
	codeFrom(t, e.consent(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(oauth2.GenerateVerifier())), allow()), "s")
	if st, _, m := registerRaw(t, e); st != http.StatusCreated {
		t.Fatalf("registration after a consent: %d %v", st, m)
	}
	for _, id := range ids {
		if _, err := e.store.OAuthClient(context.Background(), id); err != nil {
			t.Fatalf("client %s deleted: %v (none was old enough)", id, err)
		}
	}
}

// TestUnusedClientsPerSource: one address (behind a trusted proxy) at its
// quota of unused clients gets 429 with Retry-After, and cannot so fill
// the bound of all: another address still registers.
func TestUnusedClientsPerSource(t *testing.T) {
	e := newEnv(t, func(o *oauth.Options) {
		o.RateLimit = -1
		o.MaxUnusedClients = 4
		o.MaxUnusedClientsPerSource = 2
		o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	})
	for range 2 {
		if st, _, m := registerFrom(t, e, "192.0.2.1"); st != http.StatusCreated {
			t.Fatalf("registration under the quota: %d %v", st, m)
		}
	}
	st, hdr, m := registerFrom(t, e, "192.0.2.1")
	if st != http.StatusTooManyRequests || hdr.Get("Retry-After") == "" {
		t.Fatalf("registration over the quota: %d %v (Retry-After %q), want 429 with Retry-After", st, m, hdr.Get("Retry-After"))
	}
	// Another address of the same IPv6 /64 is the same source.
	for i, from := range []string{"2001:db8::1", "2001:db8::2", "2001:db8::3"} {
		want := http.StatusCreated
		if i == 2 {
			want = http.StatusTooManyRequests
		}
		if st, _, m := registerFrom(t, e, from); st != want {
			t.Fatalf("registration %d from 2001:db8::/64: %d %v, want %d", i+1, st, m, want)
		}
	}
}

// flowTokens signs alice in for a new public client and returns its
// config and tokens.
func flowTokens(t *testing.T, e *env) (*oauth2.Config, *oauth2.Token) {
	t.Helper()
	return flowClient(t, e, false)
}

// flowClient is flowTokens for a public or a confidential client (its
// secret in the config).
func flowClient(t *testing.T, e *env, confidential bool) (*oauth2.Config, *oauth2.Token) {
	t.Helper()
	const redirect = "http://127.0.0.1/cb"
	var conf *oauth2.Config
	if confidential {
		res, err := oauthex.RegisterClient(context.Background(), e.srv.URL+oauth.RegisterPath,
			&oauthex.ClientRegistrationMetadata{RedirectURIs: []string{redirect}}, nil)
		if err != nil || res.ClientSecret == "" {
			t.Fatalf("register a confidential client: %+v %v", res, err)
		}
		conf = e.config(res.ClientID, redirect)
		conf.ClientSecret = res.ClientSecret
	} else {
		conf = e.config(e.register(redirect), redirect)
	}
	v := oauth2.GenerateVerifier()
	code := codeFrom(t, e.consent(conf.AuthCodeURL("s", oauth2.S256ChallengeOption(v)), allow()), "s")
	tok, err := conf.Exchange(context.Background(), code, oauth2.VerifierOption(v))
	if err != nil {
		t.Fatal(err)
	}
	return conf, tok
}

type refreshAnswer struct {
	status          int
	access, refresh string
	err             string
}

func refresh(t *testing.T, e *env, clientID, token string) refreshAnswer {
	t.Helper()
	return refreshAs(t, e, &oauth2.Config{ClientID: clientID}, token, "")
}

// refreshAs refreshes token as conf's client (with its secret, if it has
// one), from the address from as X-Forwarded-For says ("": none).
func refreshAs(t *testing.T, e *env, conf *oauth2.Config, token, from string) refreshAnswer {
	t.Helper()
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {token}, "client_id": {conf.ClientID}}
	if conf.ClientSecret != "" {
		form.Set("client_secret", conf.ClientSecret)
	}
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+oauth.TokenPath, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if from != "" {
		req.Header.Set("X-Forwarded-For", from)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return refreshAnswer{}
	}
	defer resp.Body.Close()
	var m struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
		Err     string `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return refreshAnswer{resp.StatusCode, m.Access, m.Refresh, m.Err}
}

// TestConcurrentRefresh: a client that refreshes one token from several
// requests at once gets one rotation, the same answer for all, and keeps
// its grant.
func TestConcurrentRefresh(t *testing.T) {
	e := newEnv(t, func(o *oauth.Options) { o.RateLimit = -1 })
	conf, tok := flowTokens(t, e)
	const n = 16
	answers := make([]refreshAnswer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = refresh(t, e, conf.ClientID, tok.RefreshToken)
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if a.status != http.StatusOK || a.refresh != answers[0].refresh || a.access != answers[0].access {
			t.Fatalf("answer %d: %+v, want 200 with the first answer's tokens %+v", i, a, answers[0])
		}
	}
	if a := refresh(t, e, conf.ClientID, answers[0].refresh); a.status != http.StatusOK {
		t.Fatalf("the rotated token: %+v: the grant was revoked", a)
	}
}

// TestRefreshGrace: the just-rotated refresh token, presented again by its
// client within the grace, gets the same answer (from the same address,
// for a public client, whose client_id anyone may know); by another
// client, by a public client from another address, after the grace, after
// a revocation or with no grace at all, it revokes the grant as before.
func TestRefreshGrace(t *testing.T) {
	const grace = 5 * time.Second
	// The first refresh comes from this address (X-Forwarded-For of a
	// trusted proxy: the loopback peer).
	const home, elsewhere = "192.0.2.1", "198.51.100.9"
	type repeatFunc func(t *testing.T, e *env, conf *oauth2.Config, old string, first refreshAnswer, clock *testClock) refreshAnswer
	same := func(t *testing.T, e *env, conf *oauth2.Config, old string, _ refreshAnswer, _ *testClock) refreshAnswer {
		return refreshAs(t, e, conf, old, home)
	}
	for _, tc := range []struct {
		name         string
		grace        time.Duration
		confidential bool
		repeat       repeatFunc
		kept         bool // the grant survives
	}{
		{"same client within the grace", grace, false, same, true},
		{"same confidential client within the grace", grace, true, same, true},
		{"public client from another address", grace, false, func(t *testing.T, e *env, conf *oauth2.Config, old string, _ refreshAnswer, _ *testClock) refreshAnswer {
			return refreshAs(t, e, conf, old, elsewhere)
		}, false},
		{"confidential client from another address", grace, true, func(t *testing.T, e *env, conf *oauth2.Config, old string, _ refreshAnswer, _ *testClock) refreshAnswer {
			return refreshAs(t, e, conf, old, elsewhere) // its secret proves it
		}, true},
		{"another client", grace, false, func(t *testing.T, e *env, _ *oauth2.Config, old string, _ refreshAnswer, _ *testClock) refreshAnswer {
			return refreshAs(t, e, &oauth2.Config{ClientID: e.register("http://127.0.0.1/cb")}, old, home)
		}, false},
		{"after the grace", grace, false, func(t *testing.T, e *env, conf *oauth2.Config, old string, _ refreshAnswer, clock *testClock) refreshAnswer {
			clock.advance(grace)
			return refreshAs(t, e, conf, old, home)
		}, false},
		{"after a revocation", grace, false, func(t *testing.T, e *env, conf *oauth2.Config, old string, first refreshAnswer, _ *testClock) refreshAnswer {
			resp, err := http.PostForm(e.srv.URL+oauth.RevokePath, url.Values{"token": {first.refresh}, "client_id": {conf.ClientID}})
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			return refreshAs(t, e, conf, old, home)
		}, false},
		{"no grace", -1, false, same, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, func(o *oauth.Options) {
				o.RateLimit = -1
				o.RefreshGrace = tc.grace
				o.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
			})
			clock := &testClock{}
			oauth.SetRefreshGraceClock(e.as, clock.now)
			conf, tok := flowClient(t, e, tc.confidential)
			first := refreshAs(t, e, conf, tok.RefreshToken, home)
			if first.status != http.StatusOK {
				t.Fatalf("first refresh: %+v", first)
			}
			again := tc.repeat(t, e, conf, tok.RefreshToken, first, clock)
			if tc.kept {
				if again != first {
					t.Fatalf("repeat: %+v, want the first answer again %+v", again, first)
				}
			} else if again.status != http.StatusBadRequest || again.err != "invalid_grant" {
				t.Fatalf("repeat: %+v, want invalid_grant", again)
			}
			next := refreshAs(t, e, conf, first.refresh, home)
			if tc.kept != (next.status == http.StatusOK) {
				t.Fatalf("the rotated token afterwards: %+v; want the grant kept: %t", next, tc.kept)
			}
		})
	}
}

// testClock is time.Now moved on by advance.
type testClock struct{ skew atomic.Int64 }

func (c *testClock) now() time.Time          { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *testClock) advance(d time.Duration) { c.skew.Add(int64(d)) }
