package app

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/deliveryledger/ledger/adapters/email"
	"github.com/deliveryledger/ledger/adapters/telegram"
	"github.com/deliveryledger/ledger/adapters/webhook"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// channelKind is a channel this ledger knows how to serve: the type of provider it takes and how
// to build it from its providers' settings.
type channelKind struct {
	name         string
	providerType string
	build        func(a *App, providers []*ProviderFile) (commands.Channel, error)
}

// channelKinds lists the channels, one line each. A new channel is one adapter package and one
// line here; everything else (accept checks, queues, workers, limits, metrics, the
// configuration file) follows from the registry built from it.
var channelKinds = []channelKind{
	{webhook.Name, TypeWebhook, (*App).webhookChannel},
	{email.Name, TypeSMTP, (*App).emailChannel},
	{telegram.Name, TypeTelegram, (*App).telegramChannel},
}

func kindOf(name string) (channelKind, bool) {
	i := slices.IndexFunc(channelKinds, func(k channelKind) bool { return k.name == name })
	if i < 0 {
		return channelKind{}, false
	}
	return channelKinds[i], true
}

func kindNames() []string {
	names := make([]string, len(channelKinds))
	for i, k := range channelKinds {
		names[i] = k.name
	}
	return names
}

// defaultFile is the configuration without a file: one webhook channel with one webhook
// provider, as the ledger has always run.
func defaultFile() *File {
	return &File{
		Channels:  []ChannelFile{{Name: webhook.Name, Providers: []string{webhook.Name}}},
		Providers: map[string]*ProviderFile{webhook.Name: {Name: webhook.Name, Type: TypeWebhook}},
	}
}

// loadFile reads the configuration file the settings name, or gives the default.
func (c *Config) loadFile() (*File, error) {
	if c.ConfigFile == "" {
		return defaultFile(), nil
	}
	return LoadFile(c.ConfigFile, os.LookupEnv)
}

// registry builds the channels the file names, with their retry policies.
func (a *App) registry(file *File) (*commands.Channels, map[string]domain.RetryPolicy, error) {
	var channels []commands.Channel
	policies := map[string]domain.RetryPolicy{}
	var problems []error
	for _, cf := range file.Channels {
		kind, ok := kindOf(cf.Name)
		if !ok {
			problems = append(problems, fmt.Errorf("channel %q: unknown (known: %v)", cf.Name, kindNames()))
			continue
		}
		providers := make([]*ProviderFile, len(cf.Providers))
		for i, name := range cf.Providers {
			providers[i] = file.Providers[name]
		}
		ch, err := kind.build(a, providers)
		if err != nil {
			problems = append(problems, fmt.Errorf("channel %s: %w", cf.Name, err))
			continue
		}
		if s, ok := a.opts.senders[ch.Name]; ok {
			ch.Providers = []commands.Sender{s}
		}
		channels = append(channels, ch)
		if cf.Retry != nil {
			p := *cf.Retry
			p.RetryAfterMax = a.cfg.RetryAfterMax
			if err := p.Validate(); err != nil {
				problems = append(problems, fmt.Errorf("channels.%s.retry: %w", cf.Name, err))
			}
			policies[cf.Name] = p
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, nil, err
	}
	registry, err := commands.NewChannels(channels...)
	return registry, policies, err
}

// webhookChannel builds the webhook channel. The process-wide webhook settings (the SSRF allow
// list, the signing secrets) apply to each of its providers; --webhook-timeout, when set,
// overrides a provider's timeout.
func (a *App) webhookChannel(providers []*ProviderFile) (commands.Channel, error) {
	allow, err := webhook.ParseCIDRs(a.cfg.WebhookAllowCIDRs)
	if err != nil {
		return commands.Channel{}, fmt.Errorf("--webhook-allow-cidrs: %w", err)
	}
	secrets, err := webhook.ParseSecrets(a.cfg.WebhookSecrets)
	if err != nil {
		return commands.Channel{}, fmt.Errorf("--webhook-secrets: %w", err)
	}
	senders := make([]*webhook.Sender, len(providers))
	for i, p := range providers {
		timeout := a.cfg.WebhookTimeout
		if p.Timeout > 0 && !a.cfg.explicit["webhook-timeout"] {
			timeout = p.Timeout
		}
		senders[i], err = webhook.New(webhook.Config{Provider: p.Name, Timeout: timeout, AllowCIDRs: allow,
			InFlight: a.cfg.WorkerConcurrency, Secrets: secrets})
		if err != nil {
			return commands.Channel{}, fmt.Errorf("provider %s: %w", p.Name, err)
		}
	}
	return webhook.Channel(senders...), nil
}

// emailChannel builds the email channel, one SMTP relay per provider.
func (a *App) emailChannel(providers []*ProviderFile) (commands.Channel, error) {
	senders := make([]*email.Sender, len(providers))
	for i, p := range providers {
		var err error
		senders[i], err = email.New(email.Config{Provider: p.Name, Host: p.Host, Port: p.Port, TLS: email.TLSMode(p.TLS),
			Username: p.Username, Password: p.Password, From: p.From, Timeout: p.Timeout})
		if err != nil {
			return commands.Channel{}, fmt.Errorf("provider %s: %w", p.Name, err)
		}
	}
	return email.Channel(senders...), nil
}

// telegramChannel builds the Telegram channel, one bot per provider.
func (a *App) telegramChannel(providers []*ProviderFile) (commands.Channel, error) {
	senders := make([]*telegram.Sender, len(providers))
	for i, p := range providers {
		var err error
		senders[i], err = telegram.New(telegram.Config{Provider: p.Name, BaseURL: p.BaseURL, Token: p.Token, Timeout: p.Timeout})
		if err != nil {
			return commands.Channel{}, fmt.Errorf("provider %s: %w", p.Name, err)
		}
	}
	return telegram.Channel(senders...), nil
}

// CheckFile validates a configuration file without starting anything: it reads it, checks every
// key and value, reads the secrets it names from the environment, and builds every channel and
// provider from it (which checks their settings), then describes what it found.
func CheckFile(path string, cfg Config) ([]string, error) {
	file, err := LoadFile(path, os.LookupEnv)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: cfg}
	channels, policies, err := a.registry(file)
	if err != nil {
		return nil, err
	}
	var lines []string
	for _, name := range channels.Names() {
		ch, _ := channels.Lookup(name)
		var providers []string
		for _, p := range ch.Providers {
			providers = append(providers, p.Provider())
		}
		retry := "the server's retry policy"
		if p, ok := policies[name]; ok && len(p.Schedule) > 0 {
			retry = fmt.Sprintf("retry schedule %v (%d attempts)", p.Schedule, p.MaxAttempts)
		} else if ok {
			retry = fmt.Sprintf("retry base %s, cap %s, %d attempts", p.Base, p.Cap, p.MaxAttempts)
		}
		lines = append(lines, fmt.Sprintf("channel %s: providers %v; %s", name, providers, retry))
	}
	return lines, nil
}
