package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/toolbus/toolbus/gateway"
	"github.com/toolbus/toolbus/store"
)

// agentPage is the data of the page of one agent (GET /console/agent?name=).
type agentPage struct {
	Agent agentView
	// Resources, Templates and Prompts the agent lists, as the operator
	// sees them through the gateway; ListError says what could not be
	// listed.
	Resources, Templates, Prompts []listedItem
	ListError                     string
}

// listedItem is a resource, resource template or prompt of a list
// answer. Untrusted: rendered as text only.
type listedItem struct {
	Name        string `json:"name"`
	Title       string `json:"title"`
	Description string `json:"description"`
	URI         string `json:"uri"`
	URITemplate string `json:"uriTemplate"`
	MimeType    string `json:"mimeType"`
	Arguments   []struct {
		Name        string `json:"name"`
		Description string `json:"description"`
		Required    bool   `json:"required"`
	} `json:"arguments"`
}

// agentDetail shows one agent: its instances, each tool in full
// (description, input schema), its resources, templates and prompts. The
// agents page lists only the tools' names, so that it stays small with
// thousands of tools online.
func (c *Console) agentDetail(w http.ResponseWriter, r *http.Request, ss *session) {
	name := r.URL.Query().Get("name")
	views, toolsErr, err := c.agentViews(r.Context(), ss)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	for _, v := range views {
		if v.Name != name {
			continue
		}
		for i := range v.Tools {
			v.Tools[i].Schema = indentJSON(v.Tools[i].InputSchema)
		}
		p := agentPage{Agent: v}
		if v.Online {
			p.Resources, p.Templates, p.Prompts, p.ListError = c.agentLists(r.Context(), r, ss, name)
		}
		c.render(w, http.StatusOK, "agent", pageData{Title: "Agent " + name, Nav: "agents", User: ss.user,
			ToolsError: toolsErr, Page: p})
		return
	}
	c.render(w, http.StatusNotFound, "refused", pageData{Title: "Not found", User: ss.user,
		Message: "No agent named " + name + " is known (it may have gone away)."})
}

// agentLists asks the gateway for agent's resources, resource templates
// and prompts, as the operator with the default scopes and only that
// agent (so the gateway asks that agent alone), through ServeAs: the
// lists a client gets, with the names the union gives them.
func (c *Console) agentLists(ctx context.Context, r *http.Request, ss *session, agent string) (res, tmpl, prompts []listedItem, errText string) {
	if c.opts.ServeAs == nil {
		return nil, nil, nil, "This console cannot ask the gateway for lists."
	}
	ctx, cancel := context.WithTimeout(ctx, toolsListTimeout)
	defer cancel()
	tok := store.Token{ID: "console", UserID: ss.user, Scopes: store.DefaultScopes, Agents: []string{agent}}
	var failed []string
	for _, l := range []struct {
		method, key string
		into        *[]listedItem
	}{
		{"resources/list", "resources", &res}, {"resources/templates/list", "resourceTemplates", &tmpl}, {"prompts/list", "prompts", &prompts},
	} {
		msg, err := c.mcpCall(ctx, c.opts.ServeAs(tok), r, gateway.MCPPath, "", l.method, map[string]any{}, nil)
		if err == nil && msg.Error != nil {
			err = errors.New(msg.Error.String())
		}
		// The answer holds other members (ttlMs, cacheScope, nextCursor):
		// only the list is read.
		var page map[string]json.RawMessage
		if err == nil {
			err = json.Unmarshal(msg.Result, &page)
		}
		if err == nil && page[l.key] != nil {
			err = json.Unmarshal(page[l.key], l.into)
		}
		if err != nil {
			failed = append(failed, l.method+": "+err.Error())
			continue
		}
	}
	if len(failed) > 0 {
		errText = "Not every list could be read: " + failed[0]
	}
	return res, tmpl, prompts, errText
}
