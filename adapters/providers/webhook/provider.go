package webhook

import (
	"net/netip"
	"time"

	"github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/commands"
)

// Process is what the process's own settings (flags and environment variables, not the
// configuration file) give every webhook provider: the SSRF allow list and the signing secrets
// are the operator's, not a provider block's.
type Process struct {
	// AllowCIDRs is --webhook-allow-cidrs (Config.AllowCIDRs).
	AllowCIDRs []netip.Prefix
	// Secrets is --webhook-secrets (Config.Secrets).
	Secrets Secrets
	// Timeout is --webhook-timeout: the timeout of a provider whose block gives none, and of
	// every provider when Override (the flag was given explicitly).
	Timeout  time.Duration
	Override bool
}

// ProviderType is the webhook provider type (`{type: webhook, timeout: 10s}`) under the process's
// webhook settings: a provider of the webhook channel, which takes no key beside timeout.
// Receivers deduplicate on webhook-id, the same on every attempt, so the channel may take
// `unknown: retry`.
func ProviderType(process Process) provider.Type {
	return provider.Type{
		Name:                 Name,
		Channel:              Name,
		Unit:                 Channel,
		ReceiversDeduplicate: true,
		Check: func(s *provider.Settings) error {
			return config(s, process).Validate()
		},
		New: func(s *provider.Settings) (commands.Sender, error) { return provider.Built(New(config(s, process))) },
	}
}

// config is the Config of a provider block under the process's settings.
func config(s *provider.Settings, process Process) Config {
	timeout := process.Timeout
	if s.Timeout > 0 && !process.Override {
		timeout = s.Timeout
	}
	return Config{Provider: s.Name, Timeout: timeout, AllowCIDRs: process.AllowCIDRs, InFlight: s.InFlight,
		Secrets: process.Secrets}
}
