package console

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/internal/clip"
	"github.com/toolbus/toolbus/store"
)

// pageData is what every template gets. Agent data reaches templates only
// as strings and numbers in here: html/template escapes them as text, and
// none is ever put in a URL or an attribute that takes one.
type pageData struct {
	Title   string
	Nav     string // the page the menu marks current
	User    string // signed in; "" on the sign-in page
	Message string
	Status  int // HTTP status of a message page

	SignInUser string // the user name typed, kept on a failed sign-in
	// SignInOpenID is the OpenID provider's issuer when the sign-in page
	// offers it (Options.OpenID).
	SignInOpenID string

	Overview *overviewData
	Agents   []agentView
	// ToolsError says why the tools are missing (no agent answered).
	ToolsError string

	// Done says what an action did (shown above the page, as Message
	// shows what went wrong).
	Done string
	// Page is the page's own data (each page's file defines its type).
	Page any
}

type overviewData struct {
	AgentsOnline, InstancesOnline, AgentsKnown int
	Sessions                                   int
	SessionsKnown                              bool
	Broker                                     BrokerState
	BrokerKnown                                bool
	Version                                    string
	// Charts are the last hour's tool calls (charts.go).
	Charts *chartsView
}

// agentView is one agent (all its instances) on the agents page.
type agentView struct {
	Name      string
	Online    bool
	Instances []admin.Agent
	Tools     []toolView
}

// toolView is one agent tool on the agents pages. Flat, not embedding
// admin.AgentTool: templates look fields up by name, and an embedded
// struct's lookup costs much more at ten thousand tools a page.
type toolView struct {
	Name, Served, Qualified, Title, Description string
	InputSchema                                 json.RawMessage
	Schema                                      string // the input schema, indented JSON text (the agent's page)
}

var funcs = template.FuncMap{
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"ago": func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return time.Since(t).Round(time.Second).String() + " ago"
	},
	"interval": func(s float64) string {
		if s <= 0 {
			return "none"
		}
		return (time.Duration(s * float64(time.Second))).String()
	},
}

// withSession runs h for a signed-in admin whose session is still good;
// others go to the sign-in page. The user is read again at every request
// (one indexed row, no KDF): a removal, a lost role or a new password
// ends the session at once.
func (c *Console) withSession(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return c.session(h, true)
}

// withBackground is withSession for what a page requests by itself (event
// streams, refreshes): it does not count as a use of the session.
func (c *Console) withBackground(h func(http.ResponseWriter, *http.Request, *session)) http.HandlerFunc {
	return c.session(h, false)
}

func (c *Console) session(h func(http.ResponseWriter, *http.Request, *session), use bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ss, why := c.current(r, use)
		if ss == nil {
			if why != "" {
				c.setCookie(w, "", -1)
			}
			c.render(w, http.StatusUnauthorized, "signin", pageData{Title: "Sign in", Message: why})
			return
		}
		h(w, r, ss)
	}
}

// current returns the request's live session, or nil and why it ended
// ("" when there was none); use: the request counts as a use of it.
func (c *Console) current(r *http.Request, use bool) (*session, string) {
	ck, err := r.Cookie(c.cookieName())
	if err != nil || ck.Value == "" {
		return nil, ""
	}
	ss := c.sessions.lookup(ck.Value, time.Now(), use)
	if ss == nil {
		return nil, "Your console session ended; sign in again."
	}
	if why := c.stillAdmin(r.Context(), ss); why != "" {
		c.sessions.end(ss.id)
		c.audit(r, store.AuditEvent{Action: "session_end", UserID: ss.user, Reason: why})
		return nil, "Your console session ended: " + why + "."
	}
	return ss, ""
}

// stillAdmin says why ss may no longer be used ("" if it may).
func (c *Console) stillAdmin(ctx context.Context, ss *session) string {
	if ss.openID {
		// The provider's groups made the user an admin at sign-in; they
		// are read again at the next one (sessions end at MaxAge).
		return ""
	}
	st, err := c.opts.Users.UserState(ctx, ss.user)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "the user was removed"
	case err != nil:
		c.log.WithError(err).Error("read user state")
		return "the server could not check the user"
	case !st.Admin:
		return "the user no longer has the admin role"
	case st.PasswordStamp != ss.stamp:
		return "the password changed"
	}
	return ""
}

func (c *Console) signInPage(w http.ResponseWriter, r *http.Request) {
	if ss, _ := c.current(r, true); ss != nil {
		http.Redirect(w, r, Path, http.StatusSeeOther)
		return
	}
	c.render(w, http.StatusOK, "signin", pageData{Title: "Sign in"})
}

// maxUserKey bounds the key of a user name in the per-user limit: a
// form may carry 16 KiB of one, and the limiter holds many keys.
const maxUserKey = 256

// signIn checks the sign-in limits of the client's address and of the
// user name, then the form with the store's VerifyUser (the OAuth page's
// check), then the admin role.
func (c *Console) signIn(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.render(w, http.StatusBadRequest, "signin", pageData{Title: "Sign in", Message: "The form could not be read."})
		return
	}
	user, password := r.PostForm.Get("username"), r.PostForm.Get("password")
	if ok, wait := c.perIP.Allow(c.clientAddr(r)); !ok {
		c.tooMany(w, r, user, wait)
		return
	}
	if ok, wait := c.perUser.Allow(clip.String(user, maxUserKey)); !ok {
		c.tooMany(w, r, user, wait)
		return
	}
	if err := c.opts.Users.VerifyUser(r.Context(), user, []byte(password)); err != nil {
		if !errors.Is(err, store.ErrBadCredentials) {
			c.log.WithError(err).Error("sign-in")
			c.render(w, http.StatusServiceUnavailable, "signin", pageData{Title: "Sign in", SignInUser: user, Message: "The server cannot check the sign-in now; try again."})
			return
		}
		c.audit(r, store.AuditEvent{Action: "sign_in", UserID: user, Outcome: "refused", Reason: "wrong user name or password", Status: http.StatusUnauthorized})
		c.render(w, http.StatusUnauthorized, "signin", pageData{Title: "Sign in", SignInUser: user, Message: "Wrong user name or password."})
		return
	}
	st, err := c.opts.Users.UserState(r.Context(), user)
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		c.log.WithError(err).Error("sign-in")
		c.render(w, http.StatusServiceUnavailable, "signin", pageData{Title: "Sign in", SignInUser: user, Message: "The server cannot check the sign-in now; try again."})
		return
	}
	if !st.Admin {
		c.audit(r, store.AuditEvent{Action: "sign_in", UserID: user, Outcome: "refused", Reason: "not an admin", Status: http.StatusForbidden})
		c.render(w, http.StatusForbidden, "refused", pageData{Title: "Not an admin",
			Message: "You signed in as " + user + ", who does not have the admin role. Only admins use the console; an operator gives the role with `toolbus user admin " + user + " on`."})
		return
	}
	ss := c.sessions.add(user, st.PasswordStamp, false, time.Now())
	c.setCookie(w, ss.id, int(c.opts.MaxAge/time.Second))
	c.audit(r, store.AuditEvent{Action: "sign_in", UserID: user})
	http.Redirect(w, r, Path, http.StatusSeeOther)
}

// tooMany answers a rate-limited sign-in on the sign-in page: 429 with
// Retry-After in whole seconds, rounded up.
func (c *Console) tooMany(w http.ResponseWriter, r *http.Request, user string, wait time.Duration) {
	secs := max(1, int(wait.Seconds()+0.999))
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	c.audit(r, store.AuditEvent{Action: "sign_in", UserID: user, Outcome: "refused", Reason: "rate limited", Status: http.StatusTooManyRequests})
	c.render(w, http.StatusTooManyRequests, "signin", pageData{Title: "Sign in", SignInUser: user,
		Message: "Too many sign-in attempts; wait " + strconv.Itoa(secs) + " s and try again."})
}

func (c *Console) signOut(w http.ResponseWriter, r *http.Request) {
	if ck, err := r.Cookie(c.cookieName()); err == nil {
		if ss := c.sessions.get(ck.Value, time.Now()); ss != nil {
			c.audit(r, store.AuditEvent{Action: "sign_out", UserID: ss.user})
		}
		c.sessions.end(ck.Value)
	}
	c.setCookie(w, "", -1)
	http.Redirect(w, r, Path+"sign-in", http.StatusSeeOther)
}

// adminCtx is the context the admin model is asked in for a console
// user (admin.ConsoleContext): changes are audited with their name.
func adminCtx(ctx context.Context, ss *session) context.Context {
	return admin.ConsoleContext(ctx, ss.user)
}

func (c *Console) overview(w http.ResponseWriter, r *http.Request, ss *session) {
	ag, err := c.opts.Admin.Agents(adminCtx(r.Context(), ss))
	if err != nil && !errors.Is(err, admin.ErrNoServer) {
		c.fail(w, ss, err)
		return
	}
	o := &overviewData{Version: c.opts.Version, Charts: chartsOf(c.opts.Stats)}
	online := map[string]bool{}
	seen := map[string]bool{}
	for _, a := range ag.Agents {
		seen[a.Agent] = true
		if a.Online {
			online[a.Agent] = true
			o.InstancesOnline++
		}
	}
	o.AgentsOnline, o.AgentsKnown = len(online), len(seen)
	if c.opts.Sessions != nil {
		o.Sessions, o.SessionsKnown = c.opts.Sessions(), true
	}
	if c.opts.Broker != nil {
		o.Broker, o.BrokerKnown = c.opts.Broker(), true
	}
	c.render(w, http.StatusOK, "overview", pageData{Title: "Overview", Nav: "overview", User: ss.user, Overview: o})
}

// agentViews reads the admin model's agents and tools, grouped by agent.
func (c *Console) agentViews(ctx context.Context, ss *session) ([]agentView, string, error) {
	ag, err := c.opts.Admin.Agents(adminCtx(ctx, ss))
	if err != nil {
		return nil, "", err
	}
	var out []agentView
	at := map[string]int{}
	for _, a := range ag.Agents {
		i, ok := at[a.Agent]
		if !ok {
			i = len(out)
			at[a.Agent] = i
			out = append(out, agentView{Name: a.Agent})
		}
		out[i].Instances = append(out[i].Instances, a)
		out[i].Online = out[i].Online || a.Online
	}
	for _, t := range ag.Tools {
		i, ok := at[t.Agent]
		if !ok {
			continue
		}
		out[i].Tools = append(out[i].Tools, toolView{Name: t.Name, Served: t.Served, Qualified: t.Qualified, Title: t.Title,
			Description: t.Description, InputSchema: t.InputSchema})
	}
	return out, ag.ToolsError, nil
}

func indentJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var b bytes.Buffer
	if err := json.Indent(&b, raw, "", "  "); err != nil {
		return string(raw)
	}
	return b.String()
}

func (c *Console) agents(w http.ResponseWriter, r *http.Request, ss *session) {
	views, toolsErr, err := c.agentViews(r.Context(), ss)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	c.render(w, http.StatusOK, "agents", pageData{Title: "Agents", Nav: "agents", User: ss.user, Agents: views, ToolsError: toolsErr})
}

// agentList is the agents page's list alone, which the page's script
// fetches again when the event stream says presence changed.
func (c *Console) agentList(w http.ResponseWriter, r *http.Request, ss *session) {
	views, toolsErr, err := c.agentViews(r.Context(), ss)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	if err := c.pages["agents"].ExecuteTemplate(w, "agentlist", pageData{Agents: views, ToolsError: toolsErr}); err != nil {
		c.log.WithError(err).Error("render agent list")
	}
}

// postForm reads a console form posted by ss (bounded by maxFormBytes);
// false after it answered an error page.
func (c *Console) postForm(w http.ResponseWriter, r *http.Request, ss *session) bool {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		c.render(w, http.StatusBadRequest, "refused", pageData{Title: "Bad form", User: ss.user, Message: "The form could not be read."})
		return false
	}
	return true
}

// actionError is the status and message of an admin model's error for a
// page: the model's own refusal text as the API sends it, or, for an
// internal error, a line that points to the log (where it is written).
func (c *Console) actionError(err error) (int, string) {
	status, public := admin.Status(err)
	if public {
		return status, err.Error()
	}
	c.log.WithError(err).Error("console action")
	return status, "The server could not do it; the server log says why."
}

func (c *Console) fail(w http.ResponseWriter, ss *session, err error) {
	c.log.WithError(err).Error("console page")
	c.render(w, http.StatusInternalServerError, "refused", pageData{Title: "Error", User: ss.user, Message: "The page could not be built; the server log says why."})
}

func (c *Console) render(w http.ResponseWriter, status int, name string, d pageData) {
	if name == "signin" && c.opts.OpenID != nil {
		d.SignInOpenID = c.opts.OpenID.Issuer
		// The provider's button posts here, and the answer redirects to
		// the provider: form-action must allow that origin too.
		if o := origin(c.opts.OpenID.Issuer); o != "" {
			w.Header().Set("Content-Security-Policy", strings.Replace(csp, "form-action 'self'", "form-action 'self' "+o, 1))
		}
	}
	var b bytes.Buffer
	if err := c.pages[name].Execute(&b, d); err != nil {
		c.log.WithError(err).Error("render " + name)
		http.Error(w, "the page could not be rendered", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = b.WriteTo(w)
}

// events is the agents page's server-sent event stream: an "agents" event
// at every presence change the requester signals (no polling), a "ready"
// event once at the start. It ends with the session (sign-out, expiry,
// the user's removal or lost role) and with EndStreams.
func (c *Console) events(w http.ResponseWriter, r *http.Request, ss *session) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "event: ready\ndata: ok\n\n")
	fl.Flush()
	var changed <-chan struct{}
	var next func() <-chan struct{}
	if c.opts.Presence != nil {
		changed, next = c.opts.Presence.PresenceChanged(), c.opts.Presence.PresenceChanged
	}
	c.follow(r, ss, changed, next, func() bool {
		if _, err := fmt.Fprint(w, "event: agents\ndata: changed\n\n"); err != nil {
			return false
		}
		fl.Flush()
		return true
	})
}

// follow runs an event stream of ss: at every close of wake (a channel
// next replaces; nil: never) it checks that the session's user is still
// an admin, then calls send, until send says false, the client goes, the
// session ends or expires, or EndStreams. The agents page's presence
// stream and the audit page's live tail both run on it.
func (c *Console) follow(r *http.Request, ss *session, wake <-chan struct{}, next func() <-chan struct{}, send func() bool) {
	timer := time.NewTimer(time.Until(c.sessions.deadline(ss)))
	defer timer.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-c.done:
			return
		case <-ss.ended:
			return
		case <-timer.C:
			// Other requests may have used the session since: expire it
			// only if it is really past its deadline.
			if !c.sessions.alive(ss, time.Now()) {
				return
			}
			timer.Reset(time.Until(c.sessions.deadline(ss)))
		case <-wake:
			wake = next()
			if why := c.stillAdmin(r.Context(), ss); why != "" {
				c.sessions.end(ss.id)
				return
			}
			if !send() {
				return
			}
		}
	}
}
