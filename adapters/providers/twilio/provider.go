package twilio

import (
	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/commands"
)

// TypeName is the Twilio provider type in the configuration file (`{type: twilio, ...}`).
const TypeName = "twilio"

// ProviderType is the Twilio provider type: one account of the SMS channel. Its status callbacks
// go to {public_url}/v1/receipts/{provider}; without a public_url none is asked for and the
// reconciler's lookups decide. A phone shows every copy of a text, so the channel keeps
// `unknown: hold`.
var ProviderType = provider.Type{
	Name:    TypeName,
	Channel: sms.Name,
	Unit:    sms.Channel,
	Keys: []provider.Key{
		{Name: "base_url", Kind: provider.URL},
		{Name: "account_sid", Required: true, Help: "the account's SID, AC..."},
		{Name: "auth_token_env", Kind: provider.Secret, Required: true, Help: "the environment variable holding the auth token"},
		{Name: "from", Required: true, Help: "the sender: a number in E.164, a short code or an alphanumeric sender id"},
		provider.DeliveredOn, provider.ReceiptTimeout, provider.ReceiptMaxWait, provider.LookupRate,
	},
	Check: func(s *provider.Settings) error { return config(s).Validate() },
	New:   func(s *provider.Settings) (commands.Sender, error) { return provider.Built(New(config(s))) },
}

// config is the Config of a provider block.
func config(s *provider.Settings) Config {
	return Config{Provider: s.Name, BaseURL: s.String("base_url"), AccountSID: s.String("account_sid"),
		AuthToken: s.String("auth_token_env"), From: s.String("from"), StatusCallback: s.ReceiptURL(),
		Timeout: s.Timeout, DeliveredOn: s.String(provider.DeliveredOn.Name)}
}
