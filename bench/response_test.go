package bench

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

func TestFindResponse(t *testing.T) {
	const okBody = `{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"hi"}]}}`
	cases := []struct {
		name, contentType, body string
		wantErr                 error
	}{
		{"json", "application/json", okBody, nil},
		{"json with charset", "application/json; charset=utf-8", okBody, nil},
		{"sse", "text/event-stream", "event: message\ndata: " + okBody + "\n\n", nil},
		{"sse crlf, no event name, no trailing blank line", "text/event-stream", "data: " + okBody + "\r\n", nil},
		{"sse after notifications and a comment", "text/event-stream",
			": ok\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{}}\n\n" +
				"id: 1\ndata: " + okBody + "\n\n", nil},
		{"sse other event names skipped", "text/event-stream", "event: ping\ndata: " + okBody + "\n\n", ErrNoResponse},
		{"sse data split over lines", "text/event-stream",
			"data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":7,\"result\":{}}\n\n", nil},
		{"empty json", "application/json", "  ", ErrNoResponse},
		{"empty sse", "text/event-stream", "", ErrNoResponse},
		{"wrong id", "application/json", `{"jsonrpc":"2.0","id":8,"result":{}}`, ErrBadResponse},
		{"string id", "application/json", `{"jsonrpc":"2.0","id":"7","result":{}}`, ErrBadResponse},
		{"not json", "application/json", `<html>`, ErrBadResponse},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := findResponse(tc.contentType, []byte(tc.body), []byte("7"))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(r.ID) != "7" {
				t.Errorf("id = %s", r.ID)
			}
		})
	}
}

func TestCheckCall(t *testing.T) {
	want := "hi"
	cases := []struct {
		name, body string
		expect     *string
		wantErr    error
	}{
		{"echo", `{"id":1,"result":{"content":[{"type":"text","text":"hi"}]}}`, &want, nil},
		{"any result", `{"id":1,"result":{"content":[{"type":"text","text":"other"}]}}`, nil, nil},
		{"wrong text", `{"id":1,"result":{"content":[{"type":"text","text":"ho"}]}}`, &want, ErrWrongResult},
		{"two contents", `{"id":1,"result":{"content":[{"type":"text","text":"hi"},{"type":"text","text":"hi"}]}}`, &want, ErrWrongResult},
		{"not text", `{"id":1,"result":{"content":[{"type":"image","text":"hi"}]}}`, &want, ErrWrongResult},
		{"isError", `{"id":1,"result":{"isError":true,"content":[{"type":"text","text":"boom"}]}}`, nil, ErrToolError},
		{"rpc error", `{"id":1,"error":{"code":-32602,"message":"unknown tool"}}`, nil, ErrRPC},
		{"neither", `{"id":1}`, nil, ErrBadResponse},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := findResponse("application/json", []byte(tc.body), []byte("1"))
			if err != nil {
				t.Fatal(err)
			}
			if err := checkCall(r, tc.expect); !errors.Is(err, tc.wantErr) {
				t.Errorf("err = %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestHistogramQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h, h2 histogram
	var all []time.Duration
	for i := range 20000 {
		// Log-uniform from 50ns to ~10s, the range latencies live in.
		d := time.Duration(float64(int64(50)<<rng.IntN(28)) * (1 + rng.Float64()))
		all = append(all, d)
		if i%2 == 0 {
			h.record(d)
		} else {
			h2.record(d)
		}
	}
	h.merge(&h2)
	slices.Sort(all)
	for _, q := range []float64{0.01, 0.5, 0.9, 0.99, 0.999, 1} {
		exact := all[max(int(q*float64(len(all)))-1, 0)]
		got := h.quantile(q)
		if diff := float64(got-exact) / float64(exact); diff > 0.01 || diff < -0.01 {
			t.Errorf("q%.3f = %v, exact %v (%.2f%% off)", q, got, exact, 100*diff)
		}
	}
	if time.Duration(h.max) != all[len(all)-1] || h.n != 20000 {
		t.Errorf("max %v n %d", time.Duration(h.max), h.n)
	}
	var empty histogram
	if empty.quantile(0.5) != 0 || empty.mean() != 0 {
		t.Error("empty histogram not zero")
	}
	for _, v := range []uint64{0, 1, 127, 128, 255, 256, 1 << 40, 1<<64 - 1} {
		i := histBucket(v)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucket(%d) = %d out of range", v, i)
		}
		if lo := histValue(i); v >= histSub && (float64(lo)-float64(v))/float64(v) > 0.01 {
			t.Errorf("value of bucket(%d) = %d", v, lo)
		}
	}
}

func TestRespTemplate(t *testing.T) {
	body := func(id string) []byte {
		return []byte(`{"jsonrpc":"2.0","id":` + id + `,"result":{"content":[{"type":"text","text":"hi"}]}}`)
	}
	var tm respTemplate
	if tm.matches(false, body("1"), []byte("1")) {
		t.Fatal("empty template matches")
	}
	tm.learn(false, body("1"), []byte("1"))
	cases := []struct {
		name string
		sse  bool
		body []byte
		id   string
		want bool
	}{
		{"same response, other id", false, body("123456"), "123456", true},
		{"id mismatch", false, body("7"), "8", false},
		{"other text", false, []byte(`{"jsonrpc":"2.0","id":9,"result":{"content":[{"type":"text","text":"ho"}]}}`), "9", false},
		{"other content type", true, body("9"), "9", false},
		{"longer", false, append(body("9"), ' '), "9", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tm.matches(tc.sse, tc.body, []byte(tc.id)); got != tc.want {
				t.Errorf("matches = %v, want %v", got, tc.want)
			}
		})
	}
	var amb respTemplate
	amb.learn(false, []byte(`{"id":1,"result":{"id":1}}`), []byte("1"))
	if amb.ok {
		t.Error("learned a template whose id appears twice")
	}
	var spaced respTemplate
	spaced.learn(false, []byte(`{"id": 1}`), []byte("1"))
	if spaced.ok {
		t.Error("learned a template without a compact id")
	}
}
