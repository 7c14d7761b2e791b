package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/toolbus/toolbus/internal/testenv"
	"github.com/toolbus/toolbus/server"
	"github.com/toolbus/toolbus/store"
)

// TestServeHTTPS: with --tls-cert-file and --tls-key-file the gateway
// serves MCP over HTTPS only (the go-sdk client works through it, a plain
// HTTP request gets no answer); a reload serves a renewed certificate from
// the next handshake, and files that do not make a pair leave the served
// one as it was.
func TestServeHTTPS(t *testing.T) {
	first, pool := testenv.SelfSignedCert(t)
	second, pool2 := testenv.SelfSignedCert(t)
	both := x509.NewCertPool() // the client's roots: it follows the renewal
	both.AddCert(first.Leaf)
	both.AddCert(second.Leaf)
	dir := t.TempDir()
	certFile, keyFile := testenv.WriteCertFiles(t, first, dir)
	srv := startServer(t, server.Config{TLSCertFile: certFile, TLSKeyFile: keyFile})
	g := &gwEnv{srv: srv, base: srv.BaseURL()}
	if got := srv.BaseURL(); got[:8] != "https://" {
		t.Fatalf("BaseURL = %s, want https://", got)
	}
	tok := g.token(t, store.TokenSpec{UserID: "tls-user"})

	// served reports the leaf certificate of a new connection, whose
	// client trusts roots.
	served := func(roots *x509.CertPool) (*x509.Certificate, error) {
		c, err := tls.Dial("tcp", srv.HTTPAddr().String(), &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0], nil
	}
	if leaf, err := served(pool); err != nil || !bytes.Equal(leaf.Raw, first.Leaf.Raw) {
		t.Fatalf("served %v, %v; want the first certificate", leaf, err)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "toolbus-it", Version: "1"}, nil)
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: both}}
	t.Cleanup(tr.CloseIdleConnections)
	hc := &http.Client{Transport: bearerTransportTLS{token: tok, tr: tr}}
	cs, err := client.Connect(testCtx(t, 15*time.Second), &mcp.StreamableClientTransport{Endpoint: g.mcpURL(), HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("go-sdk client over HTTPS: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if res, err := cs.ListTools(testCtx(t, 10*time.Second), nil); err != nil || len(res.Tools) == 0 {
		t.Fatalf("tools/list over HTTPS: %+v, %v", res, err)
	}
	resp, err := http.Get("http://" + srv.HTTPAddr().String() + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP got an answer from the HTTPS listener")
		}
	}

	// A renewed certificate: served after the reload, the session goes on
	// (on new connections too).
	testenv.WriteCertFiles(t, second, dir)
	if err := srv.Reload(context.Background(), server.Reload{}); err != nil {
		t.Fatalf("reload: %v", err)
	}
	if leaf, err := served(pool2); err != nil || !bytes.Equal(leaf.Raw, second.Leaf.Raw) {
		t.Fatalf("after the reload served %v, %v; want the second certificate", leaf, err)
	}
	tr.CloseIdleConnections()
	if res, err := cs.ListTools(testCtx(t, 10*time.Second), nil); err != nil || len(res.Tools) == 0 {
		t.Fatalf("tools/list after the renewal: %+v, %v", res, err)
	}
	// Files that do not make a pair: an error, and the second stays.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := srv.Reload(context.Background(), server.Reload{}); err == nil {
		t.Fatal("reload with a broken key file: no error")
	}
	if leaf, err := served(pool2); err != nil || !bytes.Equal(leaf.Raw, second.Leaf.Raw) {
		t.Fatalf("after a failed reload served %v, %v; want the second certificate still", leaf, err)
	}
}

// bearerTransportTLS is bearerTransport through tr.
type bearerTransportTLS struct {
	token string
	tr    http.RoundTripper
}

func (b bearerTransportTLS) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.tr.RoundTrip(r)
}
