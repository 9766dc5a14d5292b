package email

import (
	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
)

// TypeName is the provider type of an SMTP relay in the configuration file (`{type: smtp, ...}`).
const TypeName = "smtp"

// Process is what every SMTP provider of a process takes beside its block: the wiring's, not the
// file's.
type Process struct {
	// Unsubscribe gives a message's one-click unsubscribe link (Config.Unsubscribe); nil: none.
	Unsubscribe func(commands.WorkMessage) (link string, ok bool)
}

// ProviderType is the SMTP provider type under the process's settings: a relay of the email
// channel. Receivers may drop a repeat of the Message-ID, the same on every attempt, so the
// channel may take `unknown: retry`.
func ProviderType(process Process) provider.Type {
	return provider.Type{
		Name:    TypeName,
		Channel: Name,
		Unit:    Channel,
		Keys: []provider.Key{
			{Name: "host", Required: true, Help: "the SMTP server's name or address"},
			{Name: "port", Kind: provider.Int, Required: true, Min: 1, Max: 65535},
			{Name: "tls", Choices: []string{string(TLSStartTLS), string(TLSImplicit), string(TLSNone)}},
			{Name: "username"},
			{Name: "password_env", Kind: provider.Secret},
			{Name: "from", Required: true, Help: "the sender address, such as \"Ledger <noreply@example.com>\""},
		},
		ReceiversDeduplicate: true,
		Check:                func(s *provider.Settings) error { return config(s).Validate() },
		New: func(s *provider.Settings) (commands.Sender, error) {
			c := config(s)
			c.Unsubscribe = process.Unsubscribe
			return provider.Built(New(c))
		},
	}
}

// config is the Config of a provider block.
func config(s *provider.Settings) Config {
	return Config{Provider: s.Name, Host: s.String("host"), Port: s.Int("port"), TLS: TLSMode(s.String("tls")),
		Username: s.String("username"), Password: s.String("password_env"), From: s.String("from"), Timeout: s.Timeout}
}
