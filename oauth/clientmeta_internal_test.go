package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/toolbus/toolbus/internal/logutil"
)

// TestCacheTTL: how long a Client ID Metadata Document is used, from its
// answer's Cache-Control, within the bounds.
func TestCacheTTL(t *testing.T) {
	const def = 5 * time.Minute
	for _, tc := range []struct {
		cc   []string
		want time.Duration
	}{
		{nil, def},
		{[]string{"public"}, def},
		{[]string{"max-age=600"}, 10 * time.Minute},
		{[]string{"public, Max-Age=\"120\""}, 2 * time.Minute},
		{[]string{"max-age=600, s-maxage=60"}, time.Minute},
		{[]string{"max-age=0"}, MinClientMetadataTTL},
		{[]string{"max-age=5"}, MinClientMetadataTTL},
		{[]string{"max-age=31536000"}, MaxClientMetadataTTL},
		{[]string{"max-age=99999999999999999999"}, def},
		{[]string{"max-age=-3"}, def},
		{[]string{"no-store"}, MinClientMetadataTTL},
		{[]string{"max-age=600", "no-cache"}, MinClientMetadataTTL},
		{[]string{"private, max-age=600"}, MinClientMetadataTTL},
	} {
		t.Run(fmtHeader(tc.cc), func(t *testing.T) {
			h := http.Header{}
			for _, v := range tc.cc {
				h.Add("Cache-Control", v)
			}
			if got := cacheTTL(h, def); got != tc.want {
				t.Errorf("cacheTTL = %v, want %v", got, tc.want)
			}
		})
	}
}

func fmtHeader(vs []string) string {
	b, _ := json.Marshal(vs)
	return string(b)
}

// TestClientMetadataCacheControl: a document served over real HTTP is
// fetched again once its Cache-Control's max-age has passed, not before,
// and one that forbids caching after MinClientMetadataTTL.
func TestClientMetadataCacheControl(t *testing.T) {
	var fetches atomic.Int64
	var cacheControl atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", cacheControl.Load().(string))
		_ = json.NewEncoder(w).Encode(map[string]any{"client_id": "http://" + r.Host + r.URL.Path,
			"client_name": "Doc", "redirect_uris": []string{"http://127.0.0.1/cb"}, "token_endpoint_auth_method": "none"})
	}))
	t.Cleanup(srv.Close)

	for i, tc := range []struct {
		cacheControl string
		ttl          time.Duration
	}{
		{"max-age=3600", time.Hour},
		{"no-store", MinClientMetadataTTL},
		{"", 5 * time.Minute},
	} {
		t.Run("Cache-Control: "+tc.cacheControl, func(t *testing.T) {
			cacheControl.Store(tc.cacheControl)
			f := newMetaFetcher(ClientMetadataOptions{AllowPrivate: true}, clientLimits{uris: 8, uriLen: 512, nameLen: 200}, logutil.OrDiscard(nil))
			now := time.Now()
			f.now = func() time.Time { return now }
			id := srv.URL + "/client/" + strconv.Itoa(i)
			fetch := func(wantFetches int64) {
				t.Helper()
				before := fetches.Load()
				if _, err := f.fetch(context.Background(), id); err != nil {
					t.Fatal(err)
				}
				if got := fetches.Load() - before; got != wantFetches {
					t.Fatalf("at +%v: %d fetches, want %d", f.now().Sub(now), got, wantFetches)
				}
			}
			start := now
			fetch(1)
			now = start.Add(tc.ttl - time.Second)
			fetch(0)
			now = start.Add(tc.ttl)
			fetch(1)
		})
	}
}
