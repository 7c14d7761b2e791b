package platformtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"golang.org/x/crypto/bcrypt"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/platformtools"
	"github.com/toolbus/toolbus/store"
)

// testCtx returns a context that ends with the test, bounded in time.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// openStore opens a real store.Store in a temporary directory.
func openStore(t *testing.T) *store.Store {
	t.Helper()
	s, err := store.Open(testCtx(t), t.TempDir(), store.StoreOptions{HashIterations: 1000, BcryptCost: bcrypt.MinCost})
	if err != nil {
		t.Fatalf("store.Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// createToken mints a real token and returns its secret and record.
func createToken(t *testing.T, s *store.Store, spec store.TokenSpec) (string, store.Token) {
	t.Helper()
	secret, tok, err := s.CreateToken(testCtx(t), spec)
	if err != nil {
		t.Fatalf("CreateToken(%+v): %v", spec, err)
	}
	return secret, tok
}

// platformRouter is the shape the gateway gives the platform API: a
// gorilla/mux router with a bearer-token middleware in front of /api/v1/
// that authenticates against the real store and puts the token in the
// request context.
func platformRouter(s *store.Store, api http.Handler) http.Handler {
	r := mux.NewRouter()
	r.PathPrefix("/api/v1/").Handler(bearerAuth(s, api))
	return r
}

func bearerAuth(s *store.Store, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		scheme, secret, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		if !strings.EqualFold(scheme, "Bearer") || secret == "" {
			unauthorized(w, "missing bearer token")
			return
		}
		tok, err := s.AuthenticateToken(r.Context(), secret)
		if err != nil {
			if errors.Is(err, store.ErrUnauthenticated) {
				unauthorized(w, err.Error())
				return
			}
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		next.ServeHTTP(w, r.WithContext(store.WithToken(r.Context(), tok, secret)))
	})
}

func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", "Bearer")
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": "unauthenticated", "message": msg})
}

// callResult is an MCP CallToolResult as a client decodes it.
type callResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent"`
	IsError           bool            `json:"isError"`
}

func (r callResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		b.WriteString(c.Text)
	}
	return b.String()
}

// callTool runs reg.Call and decodes the result; it fails the test on an
// error from Call.
func callTool(t *testing.T, reg *platformtools.Registry, call *platformtools.Call) callResult {
	t.Helper()
	raw, err := reg.Call(testCtx(t), call)
	if err != nil {
		t.Fatalf("Call(%s): %v", call.Name, err)
	}
	var res callResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("Call(%s): result %s: %v", call.Name, raw, err)
	}
	if res.Content == nil {
		t.Fatalf("Call(%s): result %s has no content array", call.Name, raw)
	}
	return res
}

// fullToken is a token with the default scopes and no narrowing, made
// without a store for registry-only tests.
func fullToken() store.Token {
	return store.Token{ID: "tb_testtest", UserID: "alice", Scopes: []string{store.ScopeToolsList, store.ScopeToolsCall}}
}

func plainContext(user string) contract.Context {
	return contract.Context{PlatformID: "p1", UserID: user, SessionID: "s1", EntityType: "_", EntityID: "_"}
}

// newRegistry returns a registry injecting into api (a handler that fails
// the test if nil and used).
func newRegistry(t *testing.T, api http.Handler, mod func(*platformtools.Options)) *platformtools.Registry {
	t.Helper()
	if api == nil {
		api = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			t.Errorf("unexpected injected request %s %s", r.Method, r.URL)
			w.WriteHeader(http.StatusTeapot)
		})
	}
	opts := platformtools.Options{API: api, CheckOutput: true}
	if mod != nil {
		mod(&opts)
	}
	return platformtools.NewRegistry(opts)
}

// mustAdd adds t to reg or fails the test.
func mustAdd(t *testing.T, reg *platformtools.Registry, tool platformtools.Tool) {
	t.Helper()
	if err := reg.Add(tool); err != nil {
		t.Fatalf("Add(%s): %v", tool.Name, err)
	}
}

// get does a real HTTP GET against srv with a bearer secret.
func get(t *testing.T, srv *httptest.Server, path, secret string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodGet, srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if secret != "" {
		req.Header.Set("Authorization", "Bearer "+secret)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: read: %v", path, err)
	}
	return resp.StatusCode, resp.Header, body
}

// jsonEqual reports whether a and b hold the same JSON value.
func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("jsonEqual: %s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("jsonEqual: %s: %v", b, err)
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}
