package conformance

import (
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestInputRequired runs every MRTR flow over the real broker, round by
// round, the way a 2026-07-28 client (or the gateway for a legacy client)
// retries.
func TestInputRequired(t *testing.T) {
	var clock atomic.Int64 // Unix ms; 0 = the real clock
	f := startFixture(t, Options{now: func() time.Time {
		if ms := clock.Load(); ms != 0 {
			return time.UnixMilli(ms)
		}
		return time.Now()
	}})

	t.Run("elicitation", func(t *testing.T) {
		const tool = "test_input_required_result_elicitation"
		ir := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyUserName)
		if ir.RequestState != nil {
			t.Errorf("requestState %q: this tool needs none", *ir.RequestState)
		}
		req := ir.InputRequests[KeyUserName]
		if req.Method != "elicitation/create" {
			t.Fatalf("method %s", req.Method)
		}
		wantJSON(t, "params", req.Params, `{"message":"What is your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`)

		alice := `{"user_name":` + elicitAccept(`{"name":"Alice"}`) + `}`
		if got := f.tool(t, tool, call{Args: "{}", Responses: alice}).text(t); got != "Hello, Alice!" {
			t.Fatalf("text %q", got)
		}
		// Extra keys are ignored.
		f.tool(t, tool, call{Args: "{}", Responses: `{"user_name":` + elicitAccept(`{"name":"Alice"}`) +
			`,"unknown_extra_key":{"action":"accept","content":{"foo":"bar"}},"another_unexpected":{"action":"accept","content":{"baz":123}}}`}).wantText(t, "Hello, Alice!")
		f.tool(t, tool, call{Responses: `{"user_name":{"action":"decline"}}`}).wantText(t, "the user chose to decline")

		// Missing, misnamed or malformed answers are asked again.
		for _, responses := range []string{
			`{}`, `{"wrong_key":` + elicitAccept(`{"data":"wrong"}`) + `}`, `{"user_name":12345}`, `{"user_name":null}`,
			`{"user_name":{"action":"accept"}}`, `{"user_name":{"action":"accept","content":{"name":7}}}`,
			`{"user_name":{"action":"maybe"}}`, `{"user_name":{"action":"accept","content":"Alice"}}`,
		} {
			f.tool(t, tool, call{Responses: responses}).inputRequired(t, KeyUserName)
		}
		// inputResponses or requestState of the wrong type is a malformed request.
		for _, c := range []call{{Responses: `null`}, {Responses: `[]`}, {Responses: `"x"`}, {StateRaw: `7`}, {StateRaw: `null`}} {
			f.tool(t, tool, c).rpcErr(t, -32602)
		}
		// So is a state the fixture never issued.
		f.tool(t, tool, call{State: "forged.state", Responses: alice}).rpcErr(t, -32602)

		// Without form elicitation the tool cannot ask.
		for _, caps := range []string{`{"sampling":{}}`, `{"elicitation":{"url":{}}}`, "none"} {
			e := f.tool(t, tool, call{Caps: caps}).rpcErr(t, CodeMissingClientCapability)
			wantJSON(t, "error data", e.Data, `{"requiredCapabilities":{"elicitation":{}}}`)
		}
		f.tool(t, tool, call{Caps: `{"elicitation":{"form":{},"url":{}}}`}).inputRequired(t, KeyUserName)
	})

	t.Run("sampling", func(t *testing.T) {
		const tool = "test_input_required_result_sampling"
		ir := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyCapitalQuestion)
		if ir.InputRequests[KeyCapitalQuestion].Method != "sampling/createMessage" {
			t.Fatalf("method %s", ir.InputRequests[KeyCapitalQuestion].Method)
		}
		wantJSON(t, "params", ir.InputRequests[KeyCapitalQuestion].Params,
			`{"messages":[{"role":"user","content":{"type":"text","text":"What is the capital of France?"}}],"maxTokens":100}`)
		f.tool(t, tool, call{Args: "{}", Responses: `{"capital_question":` + samplingAnswer("The capital of France is Paris.") + `}`}).
			wantText(t, "The model answered: The capital of France is Paris.")
		// 2025-11-25 sampling results may carry an array of content blocks.
		f.tool(t, tool, call{Responses: `{"capital_question":{"role":"assistant","content":[{"type":"image","data":"x","mimeType":"image/png"},{"type":"text","text":"Paris"}],"model":"m"}}`}).
			wantText(t, "The model answered: Paris")
		for _, bad := range []string{
			`{"role":"assistant","content":{"type":"text","text":"Paris"}}`,         // no model
			`{"role":"robot","content":{"type":"text","text":"Paris"},"model":"m"}`, // bad role
			`{"role":"assistant","model":"m"}`,                                      // no content
			`{"role":"assistant","content":[],"model":"m"}`,                         // empty content
			`{"role":"assistant","content":{"type":"text"},"model":"m"}`,            // text without text
			`{"role":"assistant","content":{"text":"Paris"},"model":"m"}`,           // block without type
			`"Paris"`,
		} {
			f.tool(t, tool, call{Responses: `{"capital_question":` + bad + `}`}).inputRequired(t, KeyCapitalQuestion)
		}
		e := f.tool(t, tool, call{Caps: `{"elicitation":{}}`}).rpcErr(t, CodeMissingClientCapability)
		wantJSON(t, "error data", e.Data, `{"requiredCapabilities":{"sampling":{}}}`)
	})

	t.Run("list roots", func(t *testing.T) {
		const tool = "test_input_required_result_list_roots"
		ir := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyClientRoots)
		if r := ir.InputRequests[KeyClientRoots]; r.Method != "roots/list" || string(r.Params) != `{}` {
			t.Fatalf("request %s %s", r.Method, r.Params)
		}
		f.tool(t, tool, call{Responses: `{"client_roots":` + rootsAnswer + `}`}).wantText(t, "1 root(s): file:///test/root")
		f.tool(t, tool, call{Responses: `{"client_roots":{"roots":[]}}`}).wantText(t, "0 root(s)")
		for _, bad := range []string{`{}`, `{"roots":[{"name":"x"}]}`, `{"roots":"x"}`, `{"roots":[{"uri":"file:///a","name":3}]}`} {
			f.tool(t, tool, call{Responses: `{"client_roots":` + bad + `}`}).inputRequired(t, KeyClientRoots)
		}
		e := f.tool(t, tool, call{Caps: `{"sampling":{}}`}).rpcErr(t, CodeMissingClientCapability)
		wantJSON(t, "error data", e.Data, `{"requiredCapabilities":{"roots":{}}}`)
	})

	confirmed := `{"confirm":` + elicitAccept(`{"ok":true}`) + `}`
	for _, tool := range []string{"test_input_required_result_request_state", "test_input_required_result_tampered_state"} {
		t.Run(tool, func(t *testing.T) {
			ir := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyConfirm)
			state := ir.state(t)
			wantJSON(t, "params", ir.InputRequests[KeyConfirm].Params,
				`{"message":"Please confirm","requestedSchema":{"type":"object","properties":{"ok":{"type":"boolean"}},"required":["ok"]}}`)
			f.tool(t, tool, call{Args: "{}", Responses: confirmed, State: state}).wantText(t, "state-ok")
			// The same state again: still valid until it expires (retries are idempotent).
			f.tool(t, tool, call{Args: "{}", Responses: confirmed, State: state}).wantText(t, "state-ok")
			// Arguments absent, null or {} are the same arguments.
			f.tool(t, tool, call{Args: "null", Responses: confirmed, State: state}).wantText(t, "state-ok")

			// Without the state, or without a usable answer: asked again, with a fresh state.
			f.tool(t, tool, call{Responses: confirmed}).inputRequired(t, KeyConfirm).state(t)
			f.tool(t, tool, call{Responses: `{"confirm":` + elicitAccept(`{"ok":"yes"}`) + `}`, State: state}).inputRequired(t, KeyConfirm)

			// Tampered, or issued for another request: refused.
			for name, c := range map[string]call{
				"suffix":         {Args: "{}", Responses: confirmed, State: state + "-TAMPERED"},
				"body":           {Responses: confirmed, State: flipFirst(state)},
				"no signature":   {Responses: confirmed, State: strings.SplitN(state, ".", 2)[0]},
				"other args":     {Args: `{"x":1}`, Responses: confirmed, State: state},
				"other caller":   {Responses: confirmed, State: state, User: "u2"},
				"other tool":     {Responses: confirmed, State: f.tool(t, otherConfirmTool(tool), call{}).inputRequired(t, KeyConfirm).state(t)},
				"other template": {Responses: confirmed, State: f.tool(t, "test_input_required_result_multi_round", call{}).inputRequired(t, KeyStep1).state(t)},
			} {
				t.Run(name, func(t *testing.T) { f.tool(t, tool, c).rpcErr(t, -32602) })
			}

			t.Run("expired", func(t *testing.T) {
				clock.Store(time.Now().Add(DefaultStateTTL + time.Minute).UnixMilli())
				defer clock.Store(0)
				e := f.tool(t, tool, call{Responses: confirmed, State: state}).rpcErr(t, -32602)
				if !strings.Contains(e.Message, "expired") {
					t.Fatalf("error %q, want one saying expired", e.Message)
				}
			})
		})
	}

	t.Run("multiple inputs", func(t *testing.T) {
		const tool = "test_input_required_result_multiple_inputs"
		ir := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyUserName, KeyGreeting, KeyClientRoots)
		s1 := ir.state(t)
		wantJSON(t, "greeting params", ir.InputRequests[KeyGreeting].Params,
			`{"messages":[{"role":"user","content":{"type":"text","text":"Generate a greeting"}}],"maxTokens":50}`)
		all := `{"user_name":` + elicitAccept(`{"name":"Alice"}`) + `,"greeting":` + samplingAnswer("Hello there!") + `,"client_roots":` + rootsAnswer + `}`
		f.tool(t, tool, call{Args: "{}", Responses: all, State: s1}).wantText(t, "Hello there! Alice (client roots: file:///test/root)")

		// A partial answer: only the rest is asked for, the name travels in the state.
		ir2 := f.tool(t, tool, call{Args: "{}", Responses: `{"user_name":` + elicitAccept(`{"name":"Bob"}`) + `}`, State: s1}).
			inputRequired(t, KeyGreeting, KeyClientRoots)
		s2 := ir2.state(t)
		if s2 == s1 {
			t.Fatal("round 2 kept the state of round 1")
		}
		f.tool(t, tool, call{Args: "{}", Responses: `{"greeting":` + samplingAnswer("Hi") + `,"client_roots":` + rootsAnswer + `}`, State: s2}).
			wantText(t, "Hi Bob (client roots: file:///test/root)")

		e := f.tool(t, tool, call{Caps: `{"elicitation":{}}`}).rpcErr(t, CodeMissingClientCapability)
		wantJSON(t, "error data", e.Data, `{"requiredCapabilities":{"roots":{},"sampling":{}}}`)
	})

	t.Run("multi round", func(t *testing.T) {
		const tool = "test_input_required_result_multi_round"
		ir1 := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyStep1)
		s1 := ir1.state(t)
		wantJSON(t, "step1 params", ir1.InputRequests[KeyStep1].Params,
			`{"message":"Step 1: What is your name?","requestedSchema":{"type":"object","properties":{"name":{"type":"string"}},"required":["name"]}}`)
		// Round 1 without its answer: step 1 again.
		f.tool(t, tool, call{Args: "{}", Responses: `{}`, State: s1}).inputRequired(t, KeyStep1)

		ir2 := f.tool(t, tool, call{Args: "{}", Responses: `{"step1":` + elicitAccept(`{"name":"Alice"}`) + `}`, State: s1}).inputRequired(t, KeyStep2)
		s2 := ir2.state(t)
		if s2 == s1 {
			t.Fatal("round 2 kept the state of round 1")
		}
		wantJSON(t, "step2 params", ir2.InputRequests[KeyStep2].Params,
			`{"message":"Step 2: What is your favorite color?","requestedSchema":{"type":"object","properties":{"color":{"type":"string"}},"required":["color"]}}`)
		// Round 2 answered with round 1's answer: step 2 again, same name.
		s2b := f.tool(t, tool, call{Args: "{}", Responses: `{"step1":` + elicitAccept(`{"name":"Eve"}`) + `}`, State: s2}).inputRequired(t, KeyStep2).state(t)
		f.tool(t, tool, call{Args: "{}", Responses: `{"step2":` + elicitAccept(`{"color":"blue"}`) + `}`, State: s2b}).
			wantText(t, "Multi-round complete: Alice likes blue")
		f.tool(t, tool, call{Args: "{}", Responses: `{"step2":{"action":"cancel"}}`, State: s2}).wantText(t, "Stopped at step 2")
		f.tool(t, tool, call{Args: "{}", Responses: `{"step1":{"action":"decline"}}`, State: s1}).wantText(t, "Stopped at step 1")
	})

	t.Run("capabilities", func(t *testing.T) {
		const tool = "test_input_required_result_capabilities"
		ir := f.tool(t, tool, call{Args: "{}", Caps: `{"sampling":{}}`}).inputRequired(t, KeyGreeting)
		if ir.RequestState != nil {
			t.Errorf("requestState %q: this tool needs none", *ir.RequestState)
		}
		f.tool(t, tool, call{Caps: `{"sampling":{}}`, Responses: `{"greeting":` + samplingAnswer("Hey") + `}`}).wantText(t, "greeting: Hey")
		f.tool(t, tool, call{}).inputRequired(t, KeyUserName, KeyGreeting, KeyClientRoots)
		f.tool(t, tool, call{Caps: `{"roots":{}}`, Responses: `{"greeting":` + samplingAnswer("Hey") + `}`}).inputRequired(t, KeyClientRoots)
		f.tool(t, tool, call{Caps: `{}`}).wantText(t, "nothing was asked")
	})

	t.Run("test_sampling", func(t *testing.T) {
		const tool = "test_sampling"
		args := `{"prompt":"Test prompt for sampling"}`
		ir := f.tool(t, tool, call{Args: args}).inputRequired(t, KeyLLMResponse)
		state := ir.state(t)
		wantJSON(t, "params", ir.InputRequests[KeyLLMResponse].Params,
			`{"messages":[{"role":"user","content":{"type":"text","text":"Test prompt for sampling"}}],"maxTokens":100}`)
		answer := `{"llm_response":` + samplingAnswer("This is a test response from the client") + `}`
		if got := f.tool(t, tool, call{Args: args, Responses: answer, State: state}).text(t); got != "LLM response: This is a test response from the client" {
			t.Fatalf("text %q", got)
		}
		// The state is bound to the prompt it asked about.
		f.tool(t, tool, call{Args: `{"prompt":"another"}`, Responses: answer, State: state}).rpcErr(t, -32602)
		// An answer without the state is not trusted: asked again.
		f.tool(t, tool, call{Args: args, Responses: answer}).inputRequired(t, KeyLLMResponse)

		r := f.tool(t, tool, call{Args: `{}`})
		var res toolResult
		if err := json.Unmarshal(r.result(t), &res); err != nil || !res.IsError {
			t.Fatalf("no prompt: %s, want an isError result", r.result(t))
		}
		e := f.tool(t, tool, call{Args: args, Caps: `{"elicitation":{}}`}).rpcErr(t, CodeMissingClientCapability)
		wantJSON(t, "error data", e.Data, `{"requiredCapabilities":{"sampling":{}}}`)
	})

	t.Run("test_elicitation", func(t *testing.T) {
		const tool = "test_elicitation"
		args := `{"message":"Please provide your information"}`
		ir := f.tool(t, tool, call{Args: args, Caps: `{"sampling":{},"elicitation":{}}`}).inputRequired(t, KeyUserInfo)
		wantJSON(t, "params", ir.InputRequests[KeyUserInfo].Params, `{"message":"Please provide your information","requestedSchema":{"type":"object",`+
			`"properties":{"username":{"type":"string","description":"User's response"},"email":{"type":"string","description":"User's email address"}},"required":["username","email"]}}`)
		state := ir.state(t)
		f.tool(t, tool, call{Args: args, State: state, Responses: `{"user_info":` + elicitAccept(`{"username":"testuser","email":"test@example.com"}`) + `}`}).
			wantText(t, `User response: action=accept, content={"email":"test@example.com","username":"testuser"}`)
		f.tool(t, tool, call{Args: args, State: state, Responses: `{"user_info":{"action":"decline"}}`}).wantText(t, "User response: action=decline")
		f.tool(t, tool, call{Args: args, State: state, Responses: `{"user_info":` + elicitAccept(`{"username":"testuser"}`) + `}`}).inputRequired(t, KeyUserInfo)
	})

	t.Run("test_elicitation_sep1034_defaults", func(t *testing.T) {
		const tool = "test_elicitation_sep1034_defaults"
		ir := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyDefaultsForm)
		wantJSON(t, "params", ir.InputRequests[KeyDefaultsForm].Params, `{"message":"Test defaults for primitives","requestedSchema":{"type":"object","properties":{`+
			`"name":{"type":"string","description":"User name","default":"John Doe"},`+
			`"age":{"type":"integer","description":"User age","default":30},`+
			`"score":{"type":"number","description":"User score","default":95.5},`+
			`"status":{"type":"string","description":"User status","default":"active","enum":["active","inactive","pending"]},`+
			`"verified":{"type":"boolean","description":"Verification status","default":true}}}}`)
		state := ir.state(t)
		f.tool(t, tool, call{Args: "{}", State: state, Responses: `{"defaults_form":` +
			elicitAccept(`{"name":"Jane Smith","age":25,"score":88,"status":"inactive","verified":false}`) + `}`}).
			wantText(t, `Elicitation completed: action=accept, content={"age":25,"name":"Jane Smith","score":88,"status":"inactive","verified":false}`)
		for _, bad := range []string{`{"age":25.5}`, `{"age":"25"}`, `{"status":"bogus"}`, `{"verified":"yes"}`, `{"score":null}`} {
			f.tool(t, tool, call{Args: "{}", State: state, Responses: `{"defaults_form":` + elicitAccept(bad) + `}`}).inputRequired(t, KeyDefaultsForm)
		}
	})

	t.Run("test_elicitation_sep1330_enums", func(t *testing.T) {
		const tool = "test_elicitation_sep1330_enums"
		ir := f.tool(t, tool, call{Args: "{}"}).inputRequired(t, KeyEnumForm)
		wantJSON(t, "params", ir.InputRequests[KeyEnumForm].Params, `{"message":"Test enum schemas","requestedSchema":{"type":"object","properties":{`+
			`"untitledSingle":{"type":"string","enum":["option1","option2","option3"]},`+
			`"titledSingle":{"type":"string","oneOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]},`+
			`"legacyEnum":{"type":"string","enum":["opt1","opt2","opt3"],"enumNames":["Option One","Option Two","Option Three"]},`+
			`"untitledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"type":"string","enum":["option1","option2","option3"]}},`+
			`"titledMulti":{"type":"array","minItems":1,"maxItems":3,"items":{"anyOf":[{"const":"value1","title":"First Option"},{"const":"value2","title":"Second Option"},{"const":"value3","title":"Third Option"}]}}}}}`)
		state := ir.state(t)
		good := `{"untitledSingle":"option1","titledSingle":"value1","legacyEnum":"opt1","untitledMulti":["option1","option2"],"titledMulti":["value1","value2"]}`
		f.tool(t, tool, call{Args: "{}", State: state, Responses: `{"enum_form":` + elicitAccept(good) + `}`}).wantText(t, "Elicitation completed: action=accept")
		for _, bad := range []string{`{"titledSingle":"First Option"}`, `{"untitledMulti":[]}`, `{"titledMulti":["value9"]}`, `{"untitledMulti":"option1"}`} {
			f.tool(t, tool, call{Args: "{}", State: state, Responses: `{"enum_form":` + elicitAccept(bad) + `}`}).inputRequired(t, KeyEnumForm)
		}
	})

	t.Run("prompt", func(t *testing.T) {
		const prompt = "test_input_required_result_prompt"
		ir := f.prompt(t, prompt, call{}).inputRequired(t, KeyUserContext)
		wantJSON(t, "params", ir.InputRequests[KeyUserContext].Params,
			`{"message":"What context should the prompt use?","requestedSchema":{"type":"object","properties":{"context":{"type":"string"}},"required":["context"]}}`)
		wantJSON(t, "prompt", f.prompt(t, prompt, call{Responses: `{"user_context":` + elicitAccept(`{"context":"test context"}`) + `}`}).result(t),
			`{"description":"A prompt with elicited context","messages":[{"role":"user","content":{"type":"text","text":"Context: test context"}}]}`)
		f.prompt(t, prompt, call{Responses: `{"user_context":` + elicitAccept(`{}`) + `}`}).inputRequired(t, KeyUserContext)
		f.prompt(t, prompt, call{State: "x.y"}).rpcErr(t, -32602)
		e := f.prompt(t, prompt, call{Caps: `{}`}).rpcErr(t, CodeMissingClientCapability)
		wantJSON(t, "error data", e.Data, `{"requiredCapabilities":{"elicitation":{}}}`)
	})

	t.Run("lists never ask", func(t *testing.T) {
		for _, m := range []string{"tools/list", "prompts/list", "resources/list", "resources/templates/list"} {
			if res := f.request(t, "u1", m, `{}`).result(t); strings.Contains(string(res), `"resultType"`) {
				t.Errorf("%s result has a resultType: %s", m, res)
			}
		}
	})
}

// otherConfirmTool is the other tool with the same confirm round.
func otherConfirmTool(tool string) string {
	if tool == "test_input_required_result_request_state" {
		return "test_input_required_result_tampered_state"
	}
	return "test_input_required_result_request_state"
}

// flipFirst changes the first character of s.
func flipFirst(s string) string {
	if s[0] == 'A' {
		return "B" + s[1:]
	}
	return "A" + s[1:]
}
