package console

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/toolbus/toolbus/acl"
	"github.com/toolbus/toolbus/admin"
)

// mqttRoutes adds the MQTT identities page and the ACL rules page, both
// through the admin model (the API's /identities and /rules, the CLI's
// mqtt-user and acl rule).
func (c *Console) mqttRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+Path+"identities", c.withSession(c.identitiesPage))
	mux.HandleFunc("POST "+Path+"identities", c.withSession(c.identityAdd))
	mux.HandleFunc("POST "+Path+"identities/{username}/disable", c.withSession(c.identityDisable))
	mux.HandleFunc("POST "+Path+"identities/{username}/enable", c.withSession(c.identityEnable))
	mux.HandleFunc("POST "+Path+"identities/{username}/password", c.withSession(c.identityPassword))
	mux.HandleFunc("POST "+Path+"identities/{username}/remove", c.withSession(c.identityRemove))
	mux.HandleFunc("GET "+Path+"rules", c.withSession(c.rulesPage))
	mux.HandleFunc("POST "+Path+"rules", c.withSession(c.ruleAdd))
	mux.HandleFunc("POST "+Path+"rules/{id}/remove", c.withSession(c.ruleRemove))
}

// mqttExternal is what both pages say when the gateway uses an external
// broker: the store changed, the broker knows only its last export.
type mqttExternal struct {
	URL string
	// Where is the export's store flag: --data-dir DIR or --store-url.
	Where string
}

// MosquittoExport and NATSExport are the export commands of
// docs/external-broker.md and docs/distributed.md.
func (e mqttExternal) MosquittoExport() string {
	return "toolbus acl export " + e.Where + " --out /etc/mosquitto/toolbus"
}

func (e mqttExternal) NATSExport() string {
	return "toolbus acl export --format nats " + e.Where + " --out /etc/nats"
}

// mqttExternalState is nil with the embedded broker (or none known).
func (c *Console) mqttExternalState(ctx context.Context) *mqttExternal {
	if c.opts.Broker == nil {
		return nil
	}
	st := c.opts.Broker()
	if !st.External {
		return nil
	}
	e := &mqttExternal{URL: st.URL, Where: "--data-dir DIR"}
	// The running process's own store, from its effective settings (set
	// by toolbus serve; absent in an embedding program).
	if sets, err := c.opts.Admin.Settings(ctx); err == nil {
		var dir, storeURL string
		for _, s := range sets {
			switch s.Name {
			case "data-dir":
				dir = s.Value
			case "store-url":
				storeURL = s.Value
			}
		}
		switch {
		case storeURL != "":
			e.Where = `--store-url "$TOOLBUS_STORE_URL"`
		case dir != "":
			e.Where = "--data-dir " + mqttShellWord(dir)
		}
	}
	return e
}

var mqttPlainWord = regexp.MustCompile(`^[A-Za-z0-9_./:=@+-]+$`)

// mqttShellWord quotes s for a POSIX shell when it needs it.
func mqttShellWord(s string) string {
	if mqttPlainWord.MatchString(s) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// identitiesData is the MQTT identities page's data.
type identitiesData struct {
	Identities  []identityRow
	Roles       []acl.Role
	MinPassword int
	// ClientsKnown: the embedded broker lists its clients; with an
	// external one the connected clients are not visible here.
	ClientsKnown bool
	External     *mqttExternal
	// Password is a password just generated, shown once, and whose.
	Password, PasswordOf string
	// The add form's fields, kept when the model refuses them.
	AddUsername, AddRole string
	AddTyped             bool
}

type identityRow struct {
	admin.Identity
	Clients []admin.MQTTClient
}

func (c *Console) renderIdentities(w http.ResponseWriter, r *http.Request, ss *session, status int, d identitiesData, done, msg string) {
	ctx := adminCtx(r.Context(), ss)
	ids, err := c.opts.Admin.ListIdentities(ctx)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	byUser := map[string][]admin.MQTTClient{}
	cls, err := c.opts.Admin.Clients(ctx)
	switch {
	case err == nil:
		d.ClientsKnown = true
		for _, cl := range cls {
			byUser[cl.Username] = append(byUser[cl.Username], cl)
		}
	case errors.Is(err, admin.ErrNoBroker), errors.Is(err, admin.ErrNoServer):
	default:
		c.fail(w, ss, err)
		return
	}
	d.Identities = make([]identityRow, len(ids))
	for i, id := range ids {
		d.Identities[i] = identityRow{Identity: id, Clients: byUser[id.Username]}
	}
	d.Roles = []acl.Role{acl.RoleExpertAgent, acl.RolePlatform, acl.RoleClient}
	d.MinPassword = admin.MinPasswordLen
	d.External = c.mqttExternalState(ctx)
	c.render(w, status, "identities", pageData{Title: "MQTT identities", Nav: "identities", User: ss.user, Page: d, Done: done, Message: msg})
}

func (c *Console) identitiesPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.renderIdentities(w, r, ss, http.StatusOK, identitiesData{}, "", "")
}

func (c *Console) identitiesRefuse(w http.ResponseWriter, r *http.Request, ss *session, d identitiesData, err error) {
	status, msg := c.actionError(err)
	c.renderIdentities(w, r, ss, status, d, "", msg)
}

// identityLive says what a change did to the identity's connected clients
// and to the broker: live on the embedded broker, stored only otherwise.
func identityLive(ch admin.IdentityChange, disconnecting bool) string {
	switch {
	case ch.Live && disconnecting:
		return "; disconnected " + mqttCount(ch.Disconnected, "client") + "."
	case ch.Live:
		return "."
	case disconnecting:
		return " in the store; nobody was disconnected: the external broker knows nothing of it until you export and reload it (see above)."
	}
	return " in the store; the external broker knows nothing of it until you export and reload it (see above)."
}

// mqttCount is "1 client", "3 clients".
func mqttCount(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}

// identityAdd adds an identity with a typed password or a generated one,
// shown once in this answer.
func (c *Console) identityAdd(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	f := r.PostForm
	d := identitiesData{AddUsername: f.Get("username"), AddRole: f.Get("role"), AddTyped: f.Get("password_mode") == "type"}
	password := ""
	if d.AddTyped {
		if password = f.Get("password"); password == "" {
			c.renderIdentities(w, r, ss, http.StatusBadRequest, d, "",
				"Type a password of at least "+strconv.Itoa(admin.MinPasswordLen)+" characters, or choose to generate one.")
			return
		}
	}
	ch, err := c.opts.Admin.AddIdentity(adminCtx(r.Context(), ss), admin.IdentityRequest{Username: d.AddUsername, Role: acl.Role(d.AddRole), Password: password})
	if err != nil {
		c.identitiesRefuse(w, r, ss, d, err)
		return
	}
	done := "Added MQTT identity " + ch.Identity.Username + " (role " + string(ch.Identity.Role) + ")" + identityLive(ch, false)
	c.renderIdentities(w, r, ss, http.StatusOK, identitiesData{Password: ch.Password, PasswordOf: ch.Identity.Username}, done, "")
}

func (c *Console) identityDisable(w http.ResponseWriter, r *http.Request, ss *session) {
	c.identitySetDisabled(w, r, ss, true)
}

func (c *Console) identityEnable(w http.ResponseWriter, r *http.Request, ss *session) {
	c.identitySetDisabled(w, r, ss, false)
}

func (c *Console) identitySetDisabled(w http.ResponseWriter, r *http.Request, ss *session, disabled bool) {
	if !c.postForm(w, r, ss) {
		return
	}
	username := r.PathValue("username")
	ch, err := c.opts.Admin.SetDisabled(adminCtx(r.Context(), ss), username, disabled)
	if err != nil {
		c.identitiesRefuse(w, r, ss, identitiesData{}, err)
		return
	}
	done := "Enabled MQTT identity " + username + identityLive(ch, false)
	if disabled {
		done = "Disabled MQTT identity " + username + identityLive(ch, true)
	}
	c.renderIdentities(w, r, ss, http.StatusOK, identitiesData{}, done, "")
}

// identityPassword sets a typed password or a generated one (shown once),
// disconnecting the identity's clients when asked.
func (c *Console) identityPassword(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	username := r.PathValue("username")
	disconnect := r.PostForm.Get("disconnect") == "on"
	ch, err := c.opts.Admin.SetPassword(adminCtx(r.Context(), ss), username,
		admin.PasswordRequest{Password: r.PostForm.Get("password"), Disconnect: disconnect})
	if err != nil {
		c.identitiesRefuse(w, r, ss, identitiesData{}, err)
		return
	}
	done := "Changed the password of MQTT identity " + username + identityLive(ch, disconnect)
	if ch.Live && !disconnect {
		done += " Its connected clients stay until they reconnect; the old password is refused from now on."
	}
	c.renderIdentities(w, r, ss, http.StatusOK, identitiesData{Password: ch.Password, PasswordOf: username}, done, "")
}

func (c *Console) identityRemove(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	username := r.PathValue("username")
	ch, err := c.opts.Admin.RemoveIdentity(adminCtx(r.Context(), ss), username)
	if err != nil {
		c.identitiesRefuse(w, r, ss, identitiesData{}, err)
		return
	}
	c.renderIdentities(w, r, ss, http.StatusOK, identitiesData{}, "Removed MQTT identity "+username+" and its ACL rules"+identityLive(ch, true), "")
}

// rulesData is the ACL rules page's data.
type rulesData struct {
	Builtin, Operator []ruleRow
	// Identities are the usernames a rule may name.
	Identities []string
	External   *mqttExternal
	// The add form's fields, kept when the rule is refused.
	AddWho, AddAccess, AddFilter string
}

// ruleRow is a rule with its WHO as the CLI shows it.
type ruleRow struct {
	admin.Rule
	Who string
}

// mqttEveryone is the add form's "who" for a rule of every identity (the
// CLI's --everyone); usernames never hold '*'.
const mqttEveryone = "*"

func (c *Console) renderRules(w http.ResponseWriter, r *http.Request, ss *session, status int, d rulesData, done, msg string) {
	ctx := adminCtx(r.Context(), ss)
	rules, err := c.opts.Admin.ListRules(ctx)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	ids, err := c.opts.Admin.ListIdentities(ctx)
	if err != nil {
		c.fail(w, ss, err)
		return
	}
	for _, rl := range rules {
		row := ruleRow{Rule: rl, Who: mqttRuleWho(rl)}
		if rl.Builtin {
			d.Builtin = append(d.Builtin, row)
		} else {
			d.Operator = append(d.Operator, row)
		}
	}
	for _, id := range ids {
		d.Identities = append(d.Identities, id.Username)
	}
	d.External = c.mqttExternalState(ctx)
	c.render(w, status, "rules", pageData{Title: "ACL rules", Nav: "rules", User: ss.user, Page: d, Done: done, Message: msg})
}

func (c *Console) rulesPage(w http.ResponseWriter, r *http.Request, ss *session) {
	c.renderRules(w, r, ss, http.StatusOK, rulesData{AddAccess: "read"}, "", "")
}

// mqttRuleWho is a rule's WHO as `toolbus acl rule list` shows it.
func mqttRuleWho(r admin.Rule) string {
	switch {
	case r.Builtin:
		return "role:" + r.Role
	case r.Username == "":
		return mqttEveryone
	}
	return r.Username
}

// mqttRuleLive says where a rule change is in force: at once on the
// embedded broker (the model reloads its policy), in the store only with
// an external one.
func mqttRuleLive(ext *mqttExternal, removed bool) string {
	switch {
	case ext != nil:
		return " in the store; the external broker knows nothing of it until you export and reload it (see above)."
	case removed:
		return "; the broker refuses what it alone allowed from now on."
	}
	return "; the broker allows what it covers from now on."
}

// ruleAdd adds an operator rule: the CLI's checks of its flags (who,
// access and filter given), then the model's (the same messages as
// `toolbus acl rule add`).
func (c *Console) ruleAdd(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	f := r.PostForm
	d := rulesData{AddWho: f.Get("who"), AddAccess: f.Get("access"), AddFilter: f.Get("filter")}
	switch {
	case d.AddWho == "":
		c.renderRules(w, r, ss, http.StatusBadRequest, d, "", "acl rule add: give an identity (--username NAME) or every identity (--everyone).")
		return
	case d.AddAccess == "" || d.AddFilter == "":
		c.renderRules(w, r, ss, http.StatusBadRequest, d, "", "acl rule add: access and filter are required (--access, --filter).")
		return
	}
	username := d.AddWho
	if username == mqttEveryone {
		username = ""
	}
	rl, err := c.opts.Admin.AddRule(adminCtx(r.Context(), ss), admin.RuleRequest{Username: username, Access: d.AddAccess, Filter: d.AddFilter})
	if err != nil {
		status, msg := c.actionError(err)
		c.renderRules(w, r, ss, status, d, "", msg)
		return
	}
	ext := c.mqttExternalState(r.Context())
	done := "Added rule " + rl.ID + ": " + mqttRuleWho(rl) + " " + rl.Access + " " + rl.Filter + mqttRuleLive(ext, false)
	c.renderRules(w, r, ss, http.StatusOK, rulesData{AddAccess: "read"}, done, "")
}

func (c *Console) ruleRemove(w http.ResponseWriter, r *http.Request, ss *session) {
	if !c.postForm(w, r, ss) {
		return
	}
	id := r.PathValue("id")
	if err := c.opts.Admin.RemoveRule(adminCtx(r.Context(), ss), id); err != nil {
		status, msg := c.actionError(err)
		c.renderRules(w, r, ss, status, rulesData{AddAccess: "read"}, "", msg)
		return
	}
	ext := c.mqttExternalState(r.Context())
	c.renderRules(w, r, ss, http.StatusOK, rulesData{AddAccess: "read"}, "Removed rule "+id+mqttRuleLive(ext, true), "")
}
