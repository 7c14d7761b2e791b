package conformance

import (
	"context"
	"fmt"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/mcp"
)

// The suite's reference payloads (its TypeScript and Go fixtures use the
// same): a 1x1 PNG and a WAV file with no samples, base64-encoded.
const (
	PNGBase64 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
	WAVBase64 = "UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA="
)

// Texts the scenarios look for.
const (
	simpleText         = "This is a simple text response for testing."
	embeddedText       = "This is an embedded resource content."
	errorText          = "This tool intentionally returns an error for testing"
	mixedText          = "Multiple content types test:"
	mixedResourceJSON  = `{"test":"data","value":123}`
	embeddedResURI     = "test://embedded-resource"
	mixedResourceURI   = "test://mixed-content-resource"
	reconnectionText   = "Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure."
	jsonSchema202012ID = "json_schema_2020_12_tool"
)

// jsonSchema202012 is the input schema of json_schema_2020_12_tool, listed
// exactly as written: the scenario checks that $schema, $defs, $anchor,
// allOf/anyOf, if/then/else and additionalProperties survive tools/list.
const jsonSchema202012 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
	`"$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},` +
	`"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},"contactMethod":{"type":"string","enum":["phone","email"]},` +
	`"phone":{"type":"string"},"email":{"type":"string"}},` +
	`"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],` +
	`"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},` +
	`"then":{"required":["phone"]},"else":{"required":["email"]},"additionalProperties":false}`

// xMCPHeaderSchema mirrors the region argument into the Mcp-Param-Region
// request header (SEP-2243), which the gateway checks.
const xMCPHeaderSchema = `{"type":"object","properties":{` +
	`"region":{"type":"string","description":"Mirrored into the Mcp-Param-Region header.","x-mcp-header":"Region"},` +
	`"level":{"type":"integer","description":"An argument not mirrored into a header."}}}`

func image() mcp.Content {
	return mcp.Content{Type: mcp.ContentImage, Data: PNGBase64, MimeType: "image/png"}
}

func textResult(format string, args ...any) *mcp.CallToolResult {
	return mcp.TextResult(fmt.Sprintf(format, args...))
}

// toolList is every tool of the fixture, in the order tools/list lists
// them.
func (f *fixture) toolList() []*fixtureTool {
	tools := []*fixtureTool{
		f.newTool("test_simple_text", "Returns one text content.", "", func(context.Context, *expertagent.CallRequest, *exchange) (any, error) {
			return mcp.TextResult(simpleText), nil
		}),
		f.newTool("test_image_content", "Returns one image content: a 1x1 PNG.", "", func(context.Context, *expertagent.CallRequest, *exchange) (any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{image()}}, nil
		}),
		f.newTool("test_audio_content", "Returns one audio content: a short WAV file (audio/wav).", "", func(context.Context, *expertagent.CallRequest, *exchange) (any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{{Type: mcp.ContentAudio, Data: WAVBase64, MimeType: "audio/wav"}}}, nil
		}),
		f.newTool("test_embedded_resource", "Returns one embedded text resource.", "", func(context.Context, *expertagent.CallRequest, *exchange) (any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{{Type: mcp.ContentResource,
				Resource: &mcp.ResourceContents{URI: embeddedResURI, MimeType: "text/plain", Text: embeddedText}}}}, nil
		}),
		f.newTool("test_multiple_content_types", "Returns a text, an image and an embedded JSON resource in one result.", "", func(context.Context, *expertagent.CallRequest, *exchange) (any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				mcp.TextContent(mixedText),
				image(),
				{Type: mcp.ContentResource, Resource: &mcp.ResourceContents{URI: mixedResourceURI, MimeType: "application/json", Text: mixedResourceJSON}},
			}}, nil
		}),
		f.newTool("test_trigger_tool_change", "Says the tool list changed (notifications/tools/list_changed) while it runs, then returns: the conformance suite's hook for list-changed notifications.", "", func(ctx context.Context, req *expertagent.CallRequest, _ *exchange) (any, error) {
			if err := req.ToolsChanged(ctx); err != nil {
				return nil, err
			}
			return mcp.TextResult("tool list changed"), nil
		}),
		f.newTool("test_error_handling", "Always fails: returns a result with isError true (a tool error, not a protocol error).", "", func(context.Context, *expertagent.CallRequest, *exchange) (any, error) {
			return mcp.ErrorResult("%s", errorText), nil
		}),
		f.newTool("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100 when the request carries a progress token, then returns.", "", f.toolWithProgress),
		f.newTool("test_tool_with_logging", "Sends three info log messages (notifications/message) while it runs, then returns.", "", f.toolWithLogging),
		f.newTool("test_logging_tool", "Sends an info log message only if the request set io.modelcontextprotocol/logLevel to info or lower, then returns.", "", f.loggingTool),
		f.newTool("test_missing_capability", "Needs the client's sampling capability: fails with -32021 (missing required client capability) when the request does not declare it.", "", f.missingCapabilityTool),
		f.newTool("test_streaming_elicitation", "Returns a plain result; the response stream carries notifications and the result only, never a request to the client.", "", f.streamingElicitation),
		f.newTool(jsonSchema202012ID, "Takes arguments described with JSON Schema 2020-12 keywords ($defs, $anchor, allOf, anyOf, if/then/else); echoes them.", jsonSchema202012, func(_ context.Context, req *expertagent.CallRequest, _ *exchange) (any, error) {
			args := string(req.Arguments)
			if args == "" {
				args = "{}"
			}
			return textResult("JSON Schema 2020-12 tool called with: %s", args), nil
		}),
		f.newTool("test_x_mcp_header", "Takes a region argument that clients mirror into the Mcp-Param-Region header (SEP-2243); echoes it.", xMCPHeaderSchema, func(_ context.Context, req *expertagent.CallRequest, _ *exchange) (any, error) {
			var in struct {
				Region string `json:"region"`
				Level  int    `json:"level"`
			}
			if err := req.Bind(&in); err != nil {
				return nil, err
			}
			return textResult("region=%s", in.Region), nil
		}),
		f.newTool("test_reconnection", "Returns after a short pause: long enough for a gateway that closes the response stream early (SEP-1699) to have the client reconnect.", "", func(ctx context.Context, _ *expertagent.CallRequest, _ *exchange) (any, error) {
			if err := f.pause(ctx); err != nil {
				return nil, err
			}
			return mcp.TextResult(reconnectionText), nil
		}),
	}
	return append(tools, f.mrtrTools()...)
}

// toolWithProgress sends progress 0, 50 and 100 of 100, StepDelay apart.
func (f *fixture) toolWithProgress(ctx context.Context, req *expertagent.CallRequest, _ *exchange) (any, error) {
	if len(req.ProgressToken) == 0 {
		return mcp.TextResult("Done; the request carried no progress token, so no progress was reported."), nil
	}
	for i, p := range []float64{0, 50, 100} {
		if i > 0 {
			if err := f.pause(ctx); err != nil {
				return nil, err
			}
		}
		if err := req.Progress(ctx, p, 100, fmt.Sprintf("Completed step %d of 3", i+1)); err != nil {
			return nil, err
		}
	}
	return textResult("Reported progress 0, 50 and 100 of 100 for token %s.", req.ProgressToken), nil
}

// logs reports whether a message at level may be sent for a request with
// meta: only at or above the level the request set, if it set one.
func logs(meta requestMeta, level string) bool {
	return meta.logLevel == "" || logSeverity(level) >= logSeverity(meta.logLevel)
}

// toolWithLogging sends three info messages StepDelay apart. Without a
// logLevel in the request it still sends them: a legacy client sets its
// level per session (logging/setLevel), and the gateway, which knows it,
// filters; a 2026 client without a logLevel gets none from the gateway.
func (f *fixture) toolWithLogging(ctx context.Context, req *expertagent.CallRequest, x *exchange) (any, error) {
	if logs(x.meta, "info") {
		for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
			if i > 0 {
				if err := f.pause(ctx); err != nil {
					return nil, err
				}
			}
			if err := req.Log(ctx, "info", msg); err != nil {
				return nil, err
			}
		}
	}
	return mcp.TextResult("Tool with logging executed successfully"), nil
}

// loggingTool logs only for a request that asked for logs
// (io.modelcontextprotocol/logLevel): a 2026 server must send no
// notifications/message otherwise.
func (f *fixture) loggingTool(ctx context.Context, req *expertagent.CallRequest, x *exchange) (any, error) {
	if x.meta.logLevel == "" || !logs(x.meta, "info") {
		return mcp.TextResult("No log message sent: the request did not ask for info messages."), nil
	}
	if err := req.Log(ctx, "info", "test_logging_tool executed"); err != nil {
		return nil, err
	}
	return textResult("One info log message sent (the request's log level is %s).", x.meta.logLevel), nil
}

func (f *fixture) missingCapabilityTool(_ context.Context, _ *expertagent.CallRequest, x *exchange) (any, error) {
	if !x.meta.caps.sampling() {
		return nil, missingCapability("test_missing_capability", "sampling")
	}
	return mcp.TextResult("The client declared the sampling capability; the tool ran."), nil
}

func (f *fixture) streamingElicitation(ctx context.Context, req *expertagent.CallRequest, _ *exchange) (any, error) {
	if err := req.Progress(ctx, 1, 1, "working"); err != nil {
		return nil, err
	}
	return mcp.TextResult("Stream observed: notifications and the result only, no request to the client."), nil
}
