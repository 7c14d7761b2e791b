package acl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/toolbus/toolbus/contract"
)

// exportSelection is what an export writes: the identities (by username)
// and the valid rules, for everyone and per exported identity, with what
// was left out and why.
type exportSelection struct {
	users   []Identity
	global  []Rule
	byUser  map[string][]Rule
	skipped []string
}

// selectExport picks what an export writes. noHash says why an identity
// lacks the hash the export needs ("" when it has it); unfit why a valid
// rule cannot be written in the export's format ("" when it can).
// Disabled identities and their rules are left out without a word: leaving
// them out is the point.
func selectExport(ids []Identity, noHash func(Identity) string, rules []Rule, unfit func(Rule) string) exportSelection {
	var sel exportSelection
	sorted := slices.Clone(ids)
	slices.SortFunc(sorted, func(a, b Identity) int { return strings.Compare(a.Username, b.Username) })
	exported := make(map[string]bool, len(sorted))
	for _, id := range sorted {
		switch {
		case id.Disabled:
			continue
		case !contract.ValidLevel(id.Username):
			sel.skipped = append(sel.skipped, fmt.Sprintf("identity %q: not a valid username", id.Username))
			continue
		case exported[id.Username]:
			sel.skipped = append(sel.skipped, fmt.Sprintf("identity %s: listed twice", id.Username))
			continue
		}
		if why := noHash(id); why != "" {
			sel.skipped = append(sel.skipped, fmt.Sprintf("identity %s: %s", id.Username, why))
			continue
		}
		exported[id.Username] = true
		sel.users = append(sel.users, id)
	}
	sel.byUser = make(map[string][]Rule)
	for _, r := range rules {
		who := RuleWho(r.Username)
		if err := r.Validate(); err != nil {
			sel.skipped = append(sel.skipped, fmt.Sprintf("rule %d for %s: %v", r.ID, who, err))
			continue
		}
		if why := unfit(r); why != "" {
			sel.skipped = append(sel.skipped, fmt.Sprintf("rule %d for %s: %s", r.ID, who, why))
			continue
		}
		if r.Username == "" {
			sel.global = append(sel.global, r)
			continue
		}
		if !exported[r.Username] {
			if !slices.ContainsFunc(sorted, func(id Identity) bool { return id.Username == r.Username && id.Disabled }) {
				sel.skipped = append(sel.skipped, fmt.Sprintf("rule %d: identity %s is not exported", r.ID, r.Username))
			}
			continue
		}
		sel.byUser[r.Username] = append(sel.byUser[r.Username], r)
	}
	return sel
}
