package contract_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/toolbus/toolbus/contract"
)

// FuzzDecodeEnvelope: any payload an agent can publish is either a valid
// envelope or one of the three documented errors; never a panic.
func FuzzDecodeEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"v":2,"correlationId":"c-1","message":{"jsonrpc":"2.0","id":"c-1","result":{}}}`,
		`{"v":2,"correlationId":"c-1","message":{}}`,
		`{"v":2,"correlationId":"","message":{}}`,
		`{"v":2,"correlationId":"c","message":[]}`,
		`{"v":2,"correlationId":"c","message":{"jsonrpc":"2.0","method":"notifications/progress"}}`,
		`null`, `[]`, `{"v":1e400}`, "\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		env, err := contract.DecodeEnvelope(payload)
		if err != nil {
			if !errors.Is(err, contract.ErrBadEnvelope) && !errors.Is(err, contract.ErrEnvelopeVersion) && !errors.Is(err, contract.ErrEnvelopeTooLarge) {
				t.Fatalf("undocumented error %v", err)
			}
			return
		}
		if env.V != contract.EnvelopeVersion || env.CorrelationID == "" || !json.Valid(env.Message) || env.Message[0] != '{' {
			t.Fatalf("accepted a bad envelope: %+v", env)
		}
	})
}

// FuzzParseTopic: a topic parses only into levels that are all valid, and
// building its topic again gives back the same topic.
func FuzzParseTopic(f *testing.F) {
	for _, s := range []string{
		"ff/v2/mcp/search/_/gw/u1/s1/_/_/req", "ff/v2/mcp/search/search-1/gw/u1/s1/project/p1/res",
		"ff/v2/mcp/search/_/gw/u+/s1/_/_/req", "ff/v2/mcp/search/_/gw/u1/s1/_/_/req/x", "ff/v2/mcp/a/b/status",
		"$SYS/x", "ff/v2/mcp/+/+/a/b/c/d/e/res", "ff/v1/mcp/gw/u1/s1/_/_/req",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, topic string) {
		tp, err := contract.ParseTopic(topic)
		if err != nil {
			return
		}
		c := tp.Context
		for _, l := range []string{tp.Agent, tp.Instance, c.PlatformID, c.UserID, c.SessionID, c.EntityType, c.EntityID} {
			if !contract.ValidLevel(l) {
				t.Fatalf("%q parsed with an invalid level %q", topic, l)
			}
		}
		again := c.RequestTopic(tp.Agent, tp.Instance)
		if tp.Kind == contract.Reply {
			again = c.ReplyTopic(tp.Agent, tp.Instance)
		}
		if again != topic {
			t.Fatalf("%q rebuilt as %q", topic, again)
		}
	})
}
