package email

import (
	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
)

// TypeName is the provider type of an SMTP relay in the configuration file (`{type: smtp, ...}`).
const TypeName = "smtp"

// ProviderType is the SMTP provider type: a relay of the email channel. Receivers may drop a
// repeat of the Message-ID, the same on every attempt, so the channel may take `unknown: retry`.
var ProviderType = provider.Type{
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
	New:                  func(s *provider.Settings) (commands.Sender, error) { return provider.Built(New(config(s))) },
}

// config is the Config of a provider block.
func config(s *provider.Settings) Config {
	return Config{Provider: s.Name, Host: s.String("host"), Port: s.Int("port"), TLS: TLSMode(s.String("tls")),
		Username: s.String("username"), Password: s.String("password_env"), From: s.String("from"), Timeout: s.Timeout}
}
