package contract

import (
	"bytes"
	"encoding/json"
	"strings"
)

// An agent answers a request with an "input required" result (SEP-2322)
// when it needs the client's input (sampling, elicitation, roots) to go on;
// the client calls again with the answers and the result's requestState.
// Most agents keep what they need in the state itself, and any instance of
// the pool can take the next round. An instance that holds the request open
// in memory instead (a bridge holds the upstream server's request, which
// waits for the answer) says so in the state: a requestState that starts
// with "@<clientID>/" makes the gateway send the round that echoes it to
// that instance alone, and fail it at once if that instance is offline.
const heldStateMark = "@"

// HoldState returns the requestState an agent instance (clientID) sends
// when it holds the request open until the next round: state, behind the
// mark that names the instance.
func HoldState(clientID, state string) string {
	return heldStateMark + clientID + "/" + state
}

// HeldState splits a requestState made by HoldState into the instance
// holding the request and the agent's own state; ok is false for any other
// string, or one whose instance is not a valid topic level.
func HeldState(requestState string) (clientID, state string, ok bool) {
	rest, found := strings.CutPrefix(requestState, heldStateMark)
	if !found {
		return "", "", false
	}
	clientID, state, found = strings.Cut(rest, "/")
	if !found || ValidateLevel(clientID) != nil {
		return "", "", false
	}
	return clientID, state, true
}

// heldStateKey is what a params object holding a HoldState state contains;
// params without it are not decoded (the common case: a first call).
var heldStateKey = []byte(`"requestState"`)

// HeldBy returns the instance that holds the request whose next round
// params are (a JSON object whose requestState HoldState made), or "".
func HeldBy(params json.RawMessage) string {
	if !bytes.Contains(params, heldStateKey) {
		return ""
	}
	var p struct {
		RequestState json.RawMessage `json:"requestState"`
	}
	if json.Unmarshal(params, &p) != nil {
		return ""
	}
	var s string
	if json.Unmarshal(p.RequestState, &s) != nil {
		return ""
	}
	clientID, _, ok := HeldState(s)
	if !ok {
		return ""
	}
	return clientID
}
