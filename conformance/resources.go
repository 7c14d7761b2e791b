package conformance

import (
	"context"
	"encoding/json"
	"regexp"

	"github.com/toolbus/toolbus/expertagent"
	"github.com/toolbus/toolbus/jsonrpc"
	"github.com/toolbus/toolbus/mcp"
)

// resourceWire is a resource as resources/list lists it.
type resourceWire struct {
	URI         string `json:"uri"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
}

// templateWire is a resource template as resources/templates/list lists it.
type templateWire struct {
	URITemplate string `json:"uriTemplate"`
	Name        string `json:"name"`
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	MimeType    string `json:"mimeType,omitempty"`
}

// staticResource is a listed resource and its one content.
type staticResource struct {
	resourceWire
	contents mcp.ResourceContents
}

// Resource URIs the scenarios read.
const (
	StaticTextURI   = "test://static-text"
	StaticBinaryURI = "test://static-binary"
	WatchedURI      = "test://watched-resource"
	TemplateURI     = "test://template/{id}/data"
)

// resources are the fixture's resources, in the order resources/list
// lists them: the caching scenario reads the first.
var resources = []staticResource{
	{resourceWire{URI: StaticTextURI, Name: "static-text", Title: "Static Text", Description: "A static text resource.", MimeType: "text/plain"},
		mcp.ResourceContents{URI: StaticTextURI, MimeType: "text/plain", Text: "This is the content of the static text resource."}},
	{resourceWire{URI: StaticBinaryURI, Name: "static-binary", Title: "Static Binary", Description: "A static binary resource: a 1x1 PNG image.", MimeType: "image/png"},
		mcp.ResourceContents{URI: StaticBinaryURI, MimeType: "image/png", Blob: PNGBase64}},
	{resourceWire{URI: WatchedURI, Name: "watched-resource", Title: "Watched Resource", Description: "A resource clients may subscribe to.", MimeType: "text/plain"},
		mcp.ResourceContents{URI: WatchedURI, MimeType: "text/plain", Text: "Watched resource content"}},
}

var templates = []templateWire{
	{URITemplate: TemplateURI, Name: "template", Title: "Template Data", Description: "JSON data for any id: the id is substituted into the content.", MimeType: "application/json"},
}

// templateRE matches the URIs of TemplateURI; the id is one path segment.
var templateRE = regexp.MustCompile(`^test://template/([^/?#]+)/data$`)

// lookupResource returns the contents of uri, or false if there is no such
// resource.
func lookupResource(uri string) (mcp.ResourceContents, bool) {
	for _, r := range resources {
		if r.URI == uri {
			return r.contents, true
		}
	}
	if m := templateRE.FindStringSubmatch(uri); m != nil {
		text, _ := json.Marshal(struct {
			ID           string `json:"id"`
			TemplateTest bool   `json:"templateTest"`
			Data         string `json:"data"`
		}{m[1], true, "Data for ID: " + m[1]})
		return mcp.ResourceContents{URI: uri, MimeType: "application/json", Text: string(text)}, true
	}
	return mcp.ResourceContents{}, false
}

// resourceNotFound is -32602 with data {"uri": uri} (SEP-2164; the
// 2025-11-25 revision used -32002, which 2026-07-28 forbids).
func resourceNotFound(uri string) *jsonrpc.Error {
	data, _ := json.Marshal(map[string]string{"uri": uri})
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: "resource not found: " + uri, Data: data}
}

// resourceURI decodes {"uri": ...}; a missing URI is -32602.
func resourceURI(req *expertagent.MethodRequest) (string, error) {
	var p struct {
		URI string `json:"uri"`
	}
	if err := decodeParams(req.Method, req.Params, &p); err != nil {
		return "", err
	}
	if p.URI == "" {
		return "", jsonrpc.NewError(jsonrpc.CodeInvalidParams, "%s: params.uri is required", req.Method)
	}
	return p.URI, nil
}

func (f *fixture) listResources(context.Context, *expertagent.MethodRequest) (any, error) {
	list := make([]resourceWire, len(resources))
	for i := range resources {
		list[i] = resources[i].resourceWire
	}
	return struct {
		Resources []resourceWire `json:"resources"`
	}{list}, nil
}

func (f *fixture) listResourceTemplates(context.Context, *expertagent.MethodRequest) (any, error) {
	return struct {
		ResourceTemplates []templateWire `json:"resourceTemplates"`
	}{templates}, nil
}

func (f *fixture) readResource(_ context.Context, req *expertagent.MethodRequest) (any, error) {
	uri, err := resourceURI(req)
	if err != nil {
		return nil, err
	}
	c, ok := lookupResource(uri)
	if !ok {
		return nil, resourceNotFound(uri)
	}
	return struct {
		Contents []mcp.ResourceContents `json:"contents"`
	}{[]mcp.ResourceContents{c}}, nil
}

// subscribeResource serves resources/subscribe and resources/unsubscribe
// (2025-11-25; 2026-07-28 has subscriptions/listen instead) with {} for a
// resource that exists. The fixture's resources never change, and an agent
// can only send notifications during a call, so there is nothing to track.
func (f *fixture) subscribeResource(_ context.Context, req *expertagent.MethodRequest) (any, error) {
	uri, err := resourceURI(req)
	if err != nil {
		return nil, err
	}
	if _, ok := lookupResource(uri); !ok {
		return nil, resourceNotFound(uri)
	}
	return struct{}{}, nil
}
