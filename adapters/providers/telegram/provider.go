package telegram

import (
	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
)

// ProviderType is the Telegram provider type (`{type: telegram, token_env: ...}`): one bot of the
// Telegram channel. sendMessage takes no idempotency key and chats show every copy, so the
// channel keeps `unknown: hold`.
var ProviderType = provider.Type{
	Name:    Name,
	Channel: Name,
	Unit:    Channel,
	Keys: []provider.Key{
		{Name: "base_url", Kind: provider.URL},
		{Name: "token_env", Kind: provider.Secret, Required: true, Help: "the environment variable holding the bot's token"},
	},
	Check: func(s *provider.Settings) error { return config(s).Validate() },
	New:   func(s *provider.Settings) (commands.Sender, error) { return provider.Built(New(config(s))) },
}

// config is the Config of a provider block.
func config(s *provider.Settings) Config {
	return Config{Provider: s.Name, BaseURL: s.String("base_url"), Token: s.String("token_env"), Timeout: s.Timeout}
}
