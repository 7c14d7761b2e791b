package platformtools

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	segjson "github.com/segmentio/encoding/json"

	"github.com/toolbus/toolbus/contract"
	"github.com/toolbus/toolbus/store"
)

// Call is one tools/call of a platform tool, as the gateway hands it to
// Registry.Call and the registry hands it to the tool's handler. The
// gateway fills the exported fields; the registry adds what Inject needs.
// A Call is used by one call only.
type Call struct {
	// Name of the tool.
	Name string
	// Arguments as sent by the client (a JSON object; empty means {}).
	// Registry.Call has validated them against the tool's input schema
	// before the handler runs.
	Arguments json.RawMessage
	// Token is who calls.
	Token store.Token
	// Secret is the caller's bearer token, forwarded on injected requests
	// so that the REST API authenticates and authorizes them as it would the
	// caller's own requests.
	Secret string
	// Context is the caller's context (platform, user, session, entity).
	Context contract.Context

	inj *injector // set by Registry.Call
}

// Entity is the entity of the call's context, as acl narrows tokens by it.
func (c *Call) Entity() store.Entity {
	return store.Entity{Type: c.Context.EntityType, ID: c.Context.EntityID}
}

// Bind decodes the arguments into v (usually a pointer to a struct),
// refusing fields v does not have. Empty arguments leave v as it is.
func (c *Call) Bind(v any) error {
	if len(bytes.TrimSpace(c.Arguments)) == 0 {
		return nil
	}
	rest, err := segjson.Parse(c.Arguments, v, segjson.DisallowUnknownFields)
	if err != nil {
		return fmt.Errorf("invalid arguments: %w", err)
	}
	if len(bytes.TrimSpace(rest)) != 0 {
		return errors.New("invalid arguments: data after the object")
	}
	return nil
}
