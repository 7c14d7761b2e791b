package platformtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/toolbus/toolbus/mcp"
	"github.com/toolbus/toolbus/platformtools"
)

// seen is what the echoing REST handler saw of an injected request.
type seen struct {
	Method, Path, Query, Auth, ContentType, Host, RemoteAddr, RequestURI string
	Body                                                                 string
	HasDeadline                                                          bool
	CtxValue                                                             string
}

type ctxKey struct{}

// echoAPI is a real http.Handler that answers 401 without the expected
// bearer token and otherwise describes the request it got.
func echoAPI(secret string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+secret {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":"unauthenticated","message":"bad token"}`)
			return
		}
		b, _ := io.ReadAll(r.Body)
		_, hasDL := r.Context().Deadline()
		v, _ := r.Context().Value(ctxKey{}).(string)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Extra", "1")
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(seen{
			Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Auth: r.Header.Get("Authorization"),
			ContentType: r.Header.Get("Content-Type"), Host: r.Host, RemoteAddr: r.RemoteAddr, RequestURI: r.RequestURI,
			Body: string(b), HasDeadline: hasDL, CtxValue: v,
		})
	})
}

// injectVia registers a tool whose handler runs f, calls it, and returns
// what f returned.
func injectVia(t *testing.T, api http.Handler, mod func(*platformtools.Options), secret string, ctx context.Context,
	f func(ctx context.Context, c *platformtools.Call) (*platformtools.InjectedResponse, error)) (*platformtools.InjectedResponse, error) {
	t.Helper()
	reg := newRegistry(t, api, mod)
	var resp *platformtools.InjectedResponse
	var err error
	mustAdd(t, reg, platformtools.Tool{
		Tool: mcp.Tool{
			Name: "inj",
		},
		Handler: func(ctx context.Context, c *platformtools.Call) (*mcp.CallToolResult, error) {
			resp, err = f(ctx, c)
			return nil, nil
		},
	})
	if _, cerr := reg.Call(ctx, &platformtools.Call{Name: "inj", Token: fullToken(), Secret: secret}); cerr != nil {
		t.Fatalf("Call: %v", cerr)
	}
	return resp, err
}

func TestInjectForwardsToken(t *testing.T) {
	const secret = "tb_abcdefgh_secret"
	type pt struct {
		A int `json:"a"`
	}
	for _, tc := range []struct {
		name, method, path string
		body               any
		wantBody, wantCT   string
	}{
		{"GET no body", http.MethodGet, "/api/v1/whoami", nil, "", ""},
		{"query kept", http.MethodGet, "/api/v1/things?limit=2&q=a%20b", nil, "", ""},
		{"bytes", http.MethodPost, "/api/v1/things", []byte(`{"a":1}`), `{"a":1}`, "application/json"},
		{"raw message", http.MethodPut, "/api/v1/things/1", json.RawMessage(`{"a":2}`), `{"a":2}`, "application/json"},
		{"string", http.MethodPatch, "/api/v1/things/1", `{"a":3}`, `{"a":3}`, "application/json"},
		{"struct encoded", http.MethodPost, "/api/v1/things", pt{4}, `{"a":4}`, "application/json"},
		{"reader as is", http.MethodPost, "/api/v1/upload", strings.NewReader("raw bytes"), "raw bytes", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.WithValue(testCtx(t), ctxKey{}, "from-caller")
			resp, err := injectVia(t, echoAPI(secret), nil, secret, ctx, func(ctx context.Context, c *platformtools.Call) (*platformtools.InjectedResponse, error) {
				return c.Inject(ctx, tc.method, tc.path, tc.body)
			})
			if err != nil {
				t.Fatalf("Inject: %v", err)
			}
			if resp.Status != http.StatusCreated || !resp.OK() || resp.Header.Get("X-Extra") != "1" {
				t.Fatalf("response status %d header %v", resp.Status, resp.Header)
			}
			var s seen
			if err := resp.DecodeJSON(&s); err != nil {
				t.Fatal(err)
			}
			path, query, _ := strings.Cut(tc.path, "?")
			want := seen{
				Method: tc.method, Path: path, Query: query, Auth: "Bearer " + secret,
				ContentType: tc.wantCT, Host: "localhost", RemoteAddr: "inject.invalid:0", RequestURI: tc.path,
				Body: tc.wantBody, HasDeadline: true, CtxValue: "", // values of the caller's ctx do not leak
			}
			if s != want {
				t.Errorf("handler saw\n%+v\nwant\n%+v", s, want)
			}
		})
	}
}

func TestInjectWrongOrMissingToken(t *testing.T) {
	for _, secret := range []string{"", "tb_wrong"} {
		t.Run("secret="+secret, func(t *testing.T) {
			resp, err := injectVia(t, echoAPI("tb_right"), nil, secret, testCtx(t), func(ctx context.Context, c *platformtools.Call) (*platformtools.InjectedResponse, error) {
				return c.Inject(ctx, http.MethodGet, "/api/v1/whoami", nil)
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != http.StatusUnauthorized || resp.OK() {
				t.Fatalf("status %d, want 401", resp.Status)
			}
			if e := resp.APIError(); e.Code != "unauthenticated" || e.Message != "bad token" {
				t.Errorf("APIError() = %+v", e)
			}
		})
	}
}

func TestInjectRecorder(t *testing.T) {
	for _, tc := range []struct {
		name       string
		h          http.HandlerFunc
		max        int64
		wantStatus int
		wantBody   string
		wantErr    error
	}{
		{"nothing written is 200", func(http.ResponseWriter, *http.Request) {}, 0, http.StatusOK, "", nil},
		{"write without status is 200", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "x") }, 0, http.StatusOK, "x", nil},
		{"first status wins", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusAccepted)
			w.WriteHeader(http.StatusInternalServerError)
		}, 0, http.StatusAccepted, "", nil},
		{"informational status skipped", func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusEarlyHints)
			w.WriteHeader(http.StatusNoContent)
		}, 0, http.StatusNoContent, "", nil},
		{"flush works", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "a")
			if err := http.NewResponseController(w).Flush(); err != nil {
				panic(err)
			}
			_, _ = io.WriteString(w, "b")
		}, 0, http.StatusOK, "ab", nil},
		{"body at the limit", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "12345") }, 5, http.StatusOK, "12345", nil},
		{"body over the limit", func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "123")
			if _, err := io.WriteString(w, "456"); !errors.Is(err, platformtools.ErrResponseTooLarge) {
				panic("second write did not fail")
			}
		}, 5, 0, "", platformtools.ErrResponseTooLarge},
		{"handler panic", func(http.ResponseWriter, *http.Request) { panic("kaput") }, 0, 0, "", platformtools.ErrHandlerPanic},
		{"abort handler", func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }, 0, 0, "", platformtools.ErrHandlerPanic},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := injectVia(t, tc.h, func(o *platformtools.Options) { o.MaxInjectResponse = tc.max }, "s", testCtx(t),
				func(ctx context.Context, c *platformtools.Call) (*platformtools.InjectedResponse, error) {
					return c.Inject(ctx, http.MethodGet, "/x", nil)
				})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) || resp != nil {
					t.Fatalf("Inject = %v, %v; want error %v", resp, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.Status != tc.wantStatus || string(resp.Body) != tc.wantBody {
				t.Errorf("got %d %q, want %d %q", resp.Status, resp.Body, tc.wantStatus, tc.wantBody)
			}
		})
	}
}

func TestInjectBadRequests(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		body               any
	}{
		{"relative path", http.MethodGet, "api/v1/whoami", nil},
		{"absolute URL", http.MethodGet, "http://example.com/api", nil},
		{"empty path", http.MethodGet, "", nil},
		{"bad method", "GE T", "/x", nil},
		{"unencodable body", http.MethodPost, "/x", map[string]any{"f": func() {}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := injectVia(t, nil, nil, "s", testCtx(t), func(ctx context.Context, c *platformtools.Call) (*platformtools.InjectedResponse, error) {
				return c.Inject(ctx, tc.method, tc.path, tc.body)
			})
			if err == nil {
				t.Fatalf("Inject(%s %q) = %+v, want an error", tc.method, tc.path, resp)
			}
		})
	}
}

func TestInjectOutsideRegistry(t *testing.T) {
	_, err := (&platformtools.Call{Secret: "s"}).Inject(testCtx(t), http.MethodGet, "/x", nil)
	if !errors.Is(err, platformtools.ErrNoInjector) {
		t.Errorf("Inject on a bare Call: err = %v, want ErrNoInjector", err)
	}
}

func TestInjectCancelledContext(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cancel()
		<-r.Context().Done() // returns at once: the caller's cancellation reaches the handler
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	resp, err := injectVia(t, api, nil, "s", testCtx(t), func(_ context.Context, c *platformtools.Call) (*platformtools.InjectedResponse, error) {
		return c.Inject(ctx, http.MethodGet, "/x", nil)
	})
	if err != nil || resp.Status != http.StatusServiceUnavailable {
		t.Errorf("Inject = %+v, %v", resp, err)
	}
}

func TestInjectHostOption(t *testing.T) {
	var host string
	api := http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) { host = r.Host })
	_, err := injectVia(t, api, func(o *platformtools.Options) { o.InjectHost = "toolbus.example.com:8443" }, "s", testCtx(t),
		func(ctx context.Context, c *platformtools.Call) (*platformtools.InjectedResponse, error) {
			return c.Inject(ctx, http.MethodGet, "/x", nil)
		})
	if err != nil || host != "toolbus.example.com:8443" {
		t.Errorf("Host = %q, err %v", host, err)
	}
}

func TestAPIErrorFallback(t *testing.T) {
	r := &platformtools.InjectedResponse{Status: http.StatusBadGateway, Body: []byte("upstream down\n")}
	if e := r.APIError(); e.Code != "bad_gateway" || e.Message != "upstream down" {
		t.Errorf("APIError() = %+v", e)
	}
}
