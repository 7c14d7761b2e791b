package console

import (
	"net/http"
	"strconv"
	"time"

	"github.com/toolbus/toolbus/admin"
	"github.com/toolbus/toolbus/store"
)

// usersData is the Users page's data.
type usersData struct {
	Users []userRow
	// Others are users limited to some agents who have no sign-in (the
	// users of tokens minted for a service, say).
	Others []userRow
	// Password is a password just generated, shown once, and whose.
	Password, PasswordOf string
	// AddUser is the add form's user name, kept when the model refuses it.
	AddUser  string
	AddAdmin bool
}

type userRow struct {
	ID      string
	Admin   bool
	Created time.Time
	Agents  []string
	// Self: the signed-in operator, who may not take away their own role
	// nor remove themselves.
	Self bool
}

// AgentsText is the grant as the form's field holds it.
func (u userRow) AgentsText() string { return accessJoin(u.Agents, "") }

func (c *Console) renderUsers(w http.ResponseWriter, r *http.Request, ss *session, status int, d usersData, done, msg string) {
	ctx := adminCtx(r.Context(), ss)
	users, err := c.opts.Admin.ListUsers(ctx)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	grants, err := c.opts.Admin.ListUserAgents(ctx)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	byUser := make(map[string][]string, len(grants))
	for _, g := range grants {
		byUser[g.User] = g.Agents
	}
	d.Users = make([]userRow, len(users))
	for i, u := range users {
		d.Users[i] = userRow{ID: u.ID, Admin: u.Admin, Created: u.Created, Agents: byUser[u.ID], Self: u.ID == ss.user}
		delete(byUser, u.ID)
	}
	for _, g := range grants {
		if _, ok := byUser[g.User]; ok {
			d.Others = append(d.Others, userRow{ID: g.User, Agents: g.Agents})
		}
	}
	c.render(w, status, "users", pageData{Title: "Users", Nav: "users", User: ss.user, Page: d, Done: done, Message: msg})
}

func (c *Console) usersPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.renderUsers(w, r, ss, http.StatusOK, usersData{}, "", "")
}

// usersRefuse answers an action the model refused.
func (c *Console) usersRefuse(w http.ResponseWriter, r *http.Request, ss *session, d usersData, err error) {
	status, msg := c.actionError(err)
	c.renderUsers(w, r, ss, status, d, "", msg)
}

// userAdd adds a sign-in user with a generated password, shown once.
func (c *Console) userAdd(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	d := usersData{AddUser: r.PostForm.Get("user"), AddAdmin: r.PostForm.Get("admin") != ""}
	ch, err := c.opts.Admin.AddUser(adminCtx(r.Context(), ss), admin.UserRequest{User: d.AddUser, Admin: d.AddAdmin})
	if err != nil {
		c.usersRefuse(w, r, ss, d, err)
		return
	}
	done := "Added user " + ch.User.ID + "."
	if ch.User.Admin {
		done = "Added user " + ch.User.ID + ", with the admin role."
	}
	c.renderUsers(w, r, ss, http.StatusOK, usersData{Password: ch.Password, PasswordOf: ch.User.ID}, done, "")
}

// selfLockout refuses a change that would lock the operator out of the
// console in the middle of their session; the refusal is audited.
func (c *Console) selfLockout(w http.ResponseWriter, r *http.Request, ss *session, action, why string) {
	c.audit(r, store.AuditEvent{Action: action, UserID: ss.user, Target: "user " + ss.user, Outcome: "refused", Reason: why, Status: http.StatusConflict})
	c.renderUsers(w, r, ss, http.StatusConflict, usersData{}, "",
		"You cannot "+why+": it would lock you out of the console mid-session. Another admin can do it, or the CLI (toolbus user).")
}

func (c *Console) userAdmin(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	user, on := r.PathValue("user"), r.PostForm.Get("admin") == "on"
	if user == ss.user && !on {
		c.selfLockout(w, r, ss, "user.admin.revoke", "take away your own admin role")
		return
	}
	if _, err := c.opts.Admin.SetUserAdmin(adminCtx(r.Context(), ss), user, admin.UserAdminRequest{Admin: on}); err != nil {
		c.usersRefuse(w, r, ss, usersData{}, err)
		return
	}
	done := "Gave " + user + " the admin role: they may sign in to the console."
	if !on {
		done = "Took the admin role back from " + user + ": their console sessions end at their next request."
	}
	c.renderUsers(w, r, ss, http.StatusOK, usersData{}, done, "")
}

// setAgents limits user's tokens to the agents of the form's field; an
// empty field lifts the limit.
func (c *Console) setAgents(w http.ResponseWriter, r *http.Request, ss *session, user string) {
	agents := accessSplit(r.PostForm.Get("agents"))
	got, err := c.opts.Admin.SetUserAgents(adminCtx(r.Context(), ss), user, admin.UserAgentsRequest{Agents: agents})
	if err != nil {
		c.usersRefuse(w, r, ss, usersData{}, err)
		return
	}
	done := "The tokens of " + user + " may use every agent."
	if len(got.Agents) > 0 {
		done = "The tokens of " + user + " may use the agents " + accessJoin(got.Agents, "") + " only."
	}
	c.renderUsers(w, r, ss, http.StatusOK, usersData{}, done, "")
}

func (c *Console) userAgents(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	c.setAgents(w, r, ss, r.PathValue("user"))
}

// userGrantsAny sets the agents of any user, sign-in user or not (the
// user of a service's tokens).
func (c *Console) userGrantsAny(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	c.setAgents(w, r, ss, r.PostForm.Get("user"))
}

// userPassword sets a generated password, shown once. The operator's own
// ends their session at the next request (they sign in with the new one).
func (c *Console) userPassword(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	user := r.PathValue("user")
	ch, err := c.opts.Admin.SetUserPassword(adminCtx(r.Context(), ss), user, admin.PasswordRequest{})
	if err != nil {
		c.usersRefuse(w, r, ss, usersData{}, err)
		return
	}
	done := "New password for " + user + "; their tokens stay valid."
	if user == ss.user {
		done += " Your console session ends at your next request: sign in again with it."
	}
	c.renderUsers(w, r, ss, http.StatusOK, usersData{Password: ch.Password, PasswordOf: user}, done, "")
}

func (c *Console) userRemove(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	user := r.PathValue("user")
	if user == ss.user {
		c.selfLockout(w, r, ss, "user.remove", "remove yourself")
		return
	}
	ch, err := c.opts.Admin.RemoveUser(adminCtx(r.Context(), ss), user)
	if err != nil {
		c.usersRefuse(w, r, ss, usersData{}, err)
		return
	}
	c.renderUsers(w, r, ss, http.StatusOK, usersData{}, "Removed user "+user+" and revoked their "+accessCount(ch.TokensRevoked, "token")+".", "")
}

// accessCount is "1 token", "3 tokens".
func accessCount(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
