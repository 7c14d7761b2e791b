package console

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/store"
)

// settingsReloadTimeout bounds a reload from the page (the reload bounds
// its own store read too).
const settingsReloadTimeout = 30 * time.Second

// maxFilter bounds the name filter kept from the query string.
const maxFilter = 100

// maxReloadReason bounds the error text an audit record of a failed
// reload keeps.
const maxReloadReason = 500

// settingsRoutes adds the Settings page: the effective configuration
// (admin.Service.Settings, GET /api/v1/admin/config) and, when the
// process can (Options.Reload), a reload that does what SIGHUP does.
func (c *Console) settingsRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+Path+"settings", c.withSession(c.settingsPage))
	mux.HandleFunc("POST "+Path+"settings/reload", c.withSession(c.settingsReload))
}

// settingsView is the Settings page's data.
type settingsView struct {
	// Known: the model has the settings (a server process); else Why.
	Known bool
	Why   string
	// Settings are those whose name holds Filter, sorted by name; Total
	// counts all.
	Settings []admin.Setting
	Total    int
	Filter   string
	// CanReload: the page has the reload button.
	CanReload bool
}

func (c *Console) settingsView(ctx context.Context, ss *session, filter string) (*settingsView, error) {
	v := &settingsView{CanReload: c.opts.Reload != nil, Filter: clip.String(strings.TrimSpace(filter), maxFilter)}
	list, err := c.opts.Admin.Settings(adminCtx(ctx, ss))
	if errors.Is(err, admin.ErrNoServer) {
		v.Why = "This console runs without a server process: there are no running settings to show."
		return v, nil
	}
	if err != nil {
		return nil, err
	}
	v.Known, v.Total = true, len(list)
	want := strings.ToLower(v.Filter)
	for _, s := range list {
		if want == "" || strings.Contains(strings.ToLower(s.Name), want) {
			v.Settings = append(v.Settings, s)
		}
	}
	slices.SortFunc(v.Settings, func(a, b admin.Setting) int { return strings.Compare(a.Name, b.Name) })
	return v, nil
}

func (c *Console) settingsPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.renderSettings(w, r, ss, http.StatusOK, r.URL.Query().Get("q"), "", "")
}

func (c *Console) renderSettings(w http.ResponseWriter, r *http.Request, ss *session, status int, filter, done, msg string) {
	v, err := c.settingsView(r.Context(), ss, filter)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	c.render(w, status, "settings", pageData{Title: "Settings", Nav: "settings", User: ss.user, Page: v, Done: done, Message: msg})
}

// settingsReload does what SIGHUP does (Options.Reload): the log level
// and the rate limits from the config file, the ACL rules from the store.
// It is audited as a console action "settings.reload" in the operator's
// name, with the error when it failed.
func (c *Console) settingsReload(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	if c.opts.Reload == nil {
		c.renderSettings(w, r, ss, http.StatusNotFound, "", "", "No reload from here: this process was started without a config to reload (toolbus serve reloads on SIGHUP and from this page).")
		return
	}
	// The reload runs to its end even if the browser goes away: a half
	// reload would leave the page's answer unknown.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), settingsReloadTimeout)
	err := c.opts.Reload(ctx)
	cancel()
	ev := store.AuditEvent{Action: "settings.reload", Target: "settings", UserID: ss.user}
	if err != nil {
		ev.Outcome, ev.Reason, ev.Status = "error", clip.Marked(err.Error(), maxReloadReason), http.StatusUnprocessableEntity
		c.audit(r, ev)
		c.renderSettings(w, r, ss, http.StatusUnprocessableEntity, "", "",
			"The reload failed; the running settings stay as they were: "+err.Error())
		return
	}
	c.audit(r, ev)
	c.renderSettings(w, r, ss, http.StatusOK, "", "Settings reloaded: the log level and the rate limits from the config file, the ACL rules from the store.", "")
}
