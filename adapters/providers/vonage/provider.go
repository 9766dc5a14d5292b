package vonage

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/commands"
)

// TypeName is the Vonage provider type in the configuration file (`{type: vonage, ...}`).
const TypeName = "vonage"

// ProviderType is the Vonage provider type: one account of the SMS channel. A phone shows every
// copy of a text, so the channel keeps `unknown: hold`.
//
// Receipts are authenticated only by the secret callback_token_env names, carried in the
// callback URL {public_url}/v1/receipts/{provider}?token=…, which is sent with every message.
// Without callback_token_env no callback URL is sent, so no receipt is asked for: with the
// default delivered_on: receipt, an accepted message waits for a receipt that is not coming and
// becomes unknown after receipt_max_wait (Vonage cannot be asked), for an operator to settle;
// any receipt posted for the provider (from the dashboard's callback setting) is refused, as it
// cannot be authenticated. Check warns of it.
var ProviderType = provider.Type{
	Name:    TypeName,
	Channel: sms.Name,
	Unit:    sms.Channel,
	Keys: []provider.Key{
		{Name: "base_url", Kind: provider.URL},
		{Name: "api_key", Required: true, Help: "the account's API key"},
		{Name: "api_secret_env", Kind: provider.Secret, Required: true, Help: "the environment variable holding the API secret"},
		{Name: "from", Required: true, Help: "the sender: a number in E.164 or an alphanumeric sender id"},
		{Name: "callback_token_env", Kind: provider.Secret},
		provider.DeliveredOn, provider.ReceiptTimeout, provider.ReceiptMaxWait,
	},
	Check: check,
	New:   func(s *provider.Settings) (commands.Sender, error) { return provider.Built(New(config(s))) },
}

// check validates a provider block and warns when its receipts cannot come.
func check(s *provider.Settings) error {
	c := config(s)
	err := c.Validate()
	awaitsReceipts := c.DeliveredOn != DeliveredOnAccept
	switch {
	case !s.Has("callback_token_env") && awaitsReceipts:
		s.Warn("no callback_token_env, so no callback URL is sent and no receipt is asked for: accepted messages become unknown after receipt_max_wait, for an operator to settle, and receipts posted for %s are refused (they cannot be authenticated)", s.Name)
	case s.Has("callback_token_env") && awaitsReceipts && s.PublicURL == "":
		problem := &provider.KeyError{Key: "public_url", Root: true,
			Err: fmt.Errorf("required by provider %s: Vonage sends its receipts to {public_url}/v1/receipts/%s (or give it delivered_on: accept)", s.Name, s.Name)}
		return errors.Join(append(provider.Problems(err), problem)...)
	}
	return err
}

// config is the Config of a provider block: the callback URL, with its token, when the block
// names a callback token and the file a public_url.
func config(s *provider.Settings) Config {
	c := Config{Provider: s.Name, BaseURL: s.String("base_url"), APIKey: s.String("api_key"), APISecret: s.String("api_secret_env"),
		From: s.String("from"), CallbackToken: s.String("callback_token_env"), Timeout: s.Timeout,
		DeliveredOn: s.String(provider.DeliveredOn.Name)}
	if cb := s.ReceiptURL(); cb != "" && c.CallbackToken != "" {
		c.Callback = cb + "?token=" + url.QueryEscape(c.CallbackToken)
	}
	return c
}
