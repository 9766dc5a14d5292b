package app

import (
	"cmp"
	"fmt"

	"github.com/deliveryledger/ledger/adapters/providers/email"
	"github.com/deliveryledger/ledger/adapters/unsubscribe"
	"github.com/deliveryledger/ledger/commands"
)

// envUnsubscribeSecret is the variable of --unsubscribe-secret, which `ledger config check`
// reads itself (it parses no serve flags).
const envUnsubscribeSecret = "LEDGER_UNSUBSCRIBE_SECRET"

// unsubscribeSecret is the key of the one-click unsubscribe links; nil when none is set.
func (a *App) unsubscribeSecret() []byte {
	if a.cfg.UnsubscribeSecret == "" {
		return nil
	}
	return []byte(a.cfg.UnsubscribeSecret)
}

// unsubscribeLink is an email message's one-click unsubscribe link (email.Process): signed over
// its tenant, the email channel, its recipient key and its category. None without a secret or a
// public_url, and none for a message without a category or of a required one (security, legal:
// no one opts out of those).
func (a *App) unsubscribeLink(m commands.WorkMessage) (string, bool) {
	secret := a.unsubscribeSecret()
	if secret == nil || a.publicURL == "" || m.Category == "" {
		return "", false
	}
	if c, ok := a.categories[m.Category]; !ok || c.Required {
		return "", false
	}
	token := unsubscribe.Sign(secret, unsubscribe.Token{Tenant: m.Tenant, Channel: email.Name,
		Recipient: cmp.Or(m.RecipientKey, m.Recipient), Category: m.Category})
	return unsubscribe.Link(a.publicURL, token), true
}

// unsubscribeWarnings says what keeps a file's categories from being unsubscribed from by email:
// categories declared, the email channel served, and no secret or no public_url, so its messages
// go without List-Unsubscribe (RFC 8058).
func unsubscribeWarnings(file *File, secret string) []string {
	optional := false
	for _, c := range file.Categories {
		optional = optional || !c.Required
	}
	served := false
	for _, ch := range file.Channels {
		served = served || ch.Name == email.Name
	}
	if !optional || !served {
		return nil
	}
	var missing []string
	if secret == "" {
		missing = append(missing, envUnsubscribeSecret+" is not set")
	}
	if file.PublicURL == "" {
		missing = append(missing, "the file has no public_url")
	}
	if len(missing) == 0 {
		return nil
	}
	what := missing[0]
	if len(missing) == 2 {
		what += " and " + missing[1]
	}
	return []string{fmt.Sprintf("categories are declared and the email channel is served, but %s: email messages carry no one-click unsubscribe (List-Unsubscribe)", what)}
}
