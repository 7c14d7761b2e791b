package expertagent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

// agentBindRef is Bind as it was before agentBindFast: encoding/json's
// Decoder, unknown fields refused, nothing after the value.
func agentBindRef(args []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("trailing data")
	}
	return nil
}

type agentBindInner struct {
	A    int             `json:"a"`
	B    *string         `json:"b"`
	Next *agentBindInner `json:"next"` // recursive
}

// agentBindArgs uses every kind agentBindable allows.
type agentBindArgs struct {
	Text   *string                   `json:"text"`
	N      int                       `json:"n"`
	I8     int8                      `json:"i8"`
	U16    uint16                    `json:"u16"`
	F32    float32                   `json:"f32"`
	F      float64                   `json:"f"`
	Ok     bool                      `json:"ok"`
	List   []string                  `json:"list"`
	M      map[string]any            `json:"m"`
	MS     map[string][]int          `json:"ms"`
	Any    any                       `json:"any"`
	In     agentBindInner            `json:"in"`
	PIn    *agentBindInner           `json:"pin"`
	Arr    [2]int                    `json:"arr"`
	Ptrs   []*agentBindInner         `json:"ptrs"`
	Kelvin string                    `json:"k"`
	S      string                    `json:"s"`
	Skip   string                    `json:"-"`
	DashK  string                    `json:"-,"`
	Omit   string                    `json:"omit,omitempty"`
	Named  agentBindName             `json:"named"`
	NM     map[agentBindName]float64 `json:"nm"`
	NoTag  string
	hidden string
}

type agentBindName string

var agentBindSeeds = []string{
	`{"text":"hi","n":1,"f":1.5,"ok":true,"list":["a",null],"m":{"x":1,"y":[1,"2",{"z":null}]},"any":-0.0}`,
	`{"any":12345678901234567890}`, `{"any":1e400}`, `{"n":1.0}`, `{"n":1e2}`, `{"i8":300}`, `{"u16":-1}`, `{"n":"1"}`, `{"f32":3.4e39}`,
	`{"text":"a\ud800b\udc00"}`, "{\"text\":\"a\xffb\"}", `{"TEXT":"x"}`, `{"Text":"x","text":"y"}`, `{"text":"\u0000\/\b\n\"\\"}`,
	`{"\u212a":"kelvin"}`, `{"\u017f":"long s"}`, `{"K":"x"}`, `{"S":"x"}`, `{"notag":"x"}`, `{"NoTag":"x"}`, `{"-":"x"}`, `{"Skip":"x"}`,
	`{"hidden":"x"}`, `{"in":{"a":1},"in":{"b":"x"}}`, `{"pin":null}`, `{"pin":{"a":2,"next":{"a":3,"next":null}}}`,
	`{"ptrs":[{"a":1},null]}`, `{"arr":[1,2,3]}`, `{"arr":[1]}`, `{"ms":{"a":[1]},"ms":{"b":[2]}}`, `{"m":null}`,
	`{"list":[]}`, `{"list":null}`, `{"list":["a","b"],"list":[null]}`, `{"text":null}`, `{"n":null}`, `{"named":"n","nm":{"a":1}}`,
	`{"unknown":1}`, `{"in":{"zz":1}}`, `{"m":{"zz":1}}`, `{"f":"1"}`, `{"ok":"true"}`, `{"ok":1}`, `{"text":1}`, `{"list":"a"}`,
	`{"in":null}`, `{"arr":null}`, `{"omit":"o"}`, `{} `, `{} x`, `[]`, `"s"`, `1`, `{`, `{"n":01}`,
	`{"m":` + strings.Repeat(`[`, 10001) + strings.Repeat(`]`, 10001) + `}`,
}

func TestAgentBindFastMatchesEncodingJSON(t *testing.T) {
	for _, in := range agentBindSeeds {
		agentCheckBind(t, []byte(in))
	}
}

func FuzzAgentBind(f *testing.F) {
	for _, in := range agentBindSeeds {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, args []byte) { agentCheckBind(t, args) })
}

// agentCheckBind: whatever the fast path accepts, encoding/json accepts,
// filling the same values.
func agentCheckBind(t *testing.T, args []byte) {
	t.Helper()
	var got, want agentBindArgs
	if !agentBindFast(args, &got) {
		return
	}
	if err := agentBindRef(args, &want); err != nil {
		t.Fatalf("%.200q: fast path accepts, encoding/json: %v", args, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%.200q:\n got %+v\nwant %+v", args, got, want)
	}
}

func TestAgentBindable(t *testing.T) {
	type withBytes struct{ B []byte }
	type withNumber struct{ N json.Number }
	type withRaw struct{ R json.RawMessage }
	type withString struct {
		N int `json:"n,string"`
	}
	type embedded struct{ agentBindInner }
	type withTime struct{ T time.Time }
	type withAddr struct{ A netip.Addr }
	type withIface struct{ E error }
	type withChan struct{ C chan int }
	tests := []struct {
		name string
		v    any
		want bool
	}{
		{"rich struct", &agentBindArgs{}, true},
		{"map", &map[string]any{}, true},
		{"slice", &[]int{}, true},
		{"any", new(any), true},
		{"not a pointer", agentBindArgs{}, false},
		{"nil", nil, false},
		{"[]byte", &withBytes{}, false},
		{"json.Number", &withNumber{}, false},
		{"json.RawMessage", &withRaw{}, false},
		{",string option", &withString{}, false},
		{"embedded struct", &embedded{}, false},
		{"json.Unmarshaler", &withTime{}, false},
		{"TextUnmarshaler", &withAddr{}, false},
		{"non-empty interface", &withIface{}, false},
		{"channel", &withChan{}, false},
		{"map with non-string keys", &map[int]string{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := agentBindable(reflect.TypeOf(tc.v)); got != tc.want {
				t.Errorf("agentBindable(%T) = %v, want %v", tc.v, got, tc.want)
			}
		})
	}
}
