package app

import (
	"fmt"

	"github.com/deliveryledger/ledger/adapters/webhook"
	"github.com/deliveryledger/ledger/commands"
)

// registry builds the channels this ledger serves. A channel is one adapter package and one
// line in the list below; everything else (accept checks, queues, workers, limits, metrics)
// follows from the registry.
func (a *App) registry() (*commands.Channels, error) {
	builders := []func() (commands.Channel, error){
		a.webhookChannel,
	}
	var channels []commands.Channel
	for _, build := range builders {
		ch, err := build()
		if err != nil {
			return nil, err
		}
		if s, ok := a.opts.senders[ch.Name]; ok {
			ch.Providers = []commands.Sender{s}
		}
		channels = append(channels, ch)
	}
	return commands.NewChannels(channels...)
}

// webhookChannel builds the webhook channel from its settings.
func (a *App) webhookChannel() (commands.Channel, error) {
	allow, err := webhook.ParseCIDRs(a.cfg.WebhookAllowCIDRs)
	if err != nil {
		return commands.Channel{}, fmt.Errorf("--webhook-allow-cidrs: %w", err)
	}
	s, err := webhook.New(webhook.Config{Timeout: a.cfg.WebhookTimeout, AllowCIDRs: allow, InFlight: a.cfg.WorkerConcurrency})
	if err != nil {
		return commands.Channel{}, err
	}
	return webhook.Channel(s), nil
}
