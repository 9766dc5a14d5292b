package app

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/breaker"
	"github.com/deliveryledger/ledger/adapters/email"
	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/sms"
	"github.com/deliveryledger/ledger/adapters/telegram"
	"github.com/deliveryledger/ledger/adapters/twilio"
	"github.com/deliveryledger/ledger/adapters/vonage"
	"github.com/deliveryledger/ledger/adapters/webhook"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// channelKind is a channel this ledger knows how to serve: the type of provider it takes and how
// to build it from its providers' settings.
type channelKind struct {
	name          string
	providerTypes []string
	build         func(a *App, providers []*ProviderFile) (commands.Channel, error)
}

// channelKinds lists the channels, one line each. A new channel is one adapter package and one
// line here; everything else (accept checks, queues, workers, limits, metrics, the
// configuration file) follows from the registry built from it.
var channelKinds = []channelKind{
	{webhook.Name, []string{TypeWebhook}, (*App).webhookChannel},
	{email.Name, []string{TypeSMTP}, (*App).emailChannel},
	{telegram.Name, []string{TypeTelegram}, (*App).telegramChannel},
	{sms.Name, []string{TypeTwilio, TypeVonage}, (*App).smsChannel},
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
	a.publicURL, a.providers = file.PublicURL, nil
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
		a.describe(ch, providers)
		if s, ok := a.opts.senders[ch.Name]; ok {
			ch.Providers = []commands.Sender{s}
		}
		channels = append(channels, ch)
		if cf.Retry != nil || cf.Unknown == UnknownRetry {
			p := a.cfg.policy()
			if cf.Retry != nil {
				p = *cf.Retry
				p.RetryAfterMax = a.cfg.RetryAfterMax
			}
			p.RetryUnknown = cf.Unknown == UnknownRetry
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
		if p, ok := policies[name]; ok && p.RetryUnknown {
			retry += "; unknown: retry (possible duplicates marked)"
		}
		lines = append(lines, fmt.Sprintf("channel %s: providers %v; %s", name, providers, retry))
	}
	for _, p := range a.providers {
		var notes []string
		if p.receipts != nil {
			if a.publicURL != "" {
				notes = append(notes, "receipts at "+strings.TrimSuffix(a.publicURL, "/")+"/v1/receipts/"+p.name)
			} else {
				notes = append(notes, "no public_url: the provider is not sent a callback URL")
			}
		}
		if p.lookup != nil {
			notes = append(notes, fmt.Sprintf("looked up after %s, %g lookups/s", p.recheck, p.lookupRate))
		}
		if len(notes) > 0 {
			lines = append(lines, fmt.Sprintf("provider %s: %s", p.name, strings.Join(notes, "; ")))
		}
	}
	return lines, nil
}

// provider is one configured provider as the wiring keeps it beside its channel's senders: what
// the breakers, the reconciler and the receipts endpoint need of it.
type provider struct {
	name, typ, channel string
	breaker            breaker.Settings
	// receipts reads the provider's callbacks; nil when it sends none.
	receipts httpapi.ReceiptParser
	// lookup asks the provider about a message; nil when it cannot be asked.
	lookup commands.Lookup
	// recheck is the provider's receipt timeout, the pause between two lookups of a message
	// still on its way; lookupRate bounds its lookups a second.
	recheck    time.Duration
	lookupRate float64
}

// defaultLookupRate is the lookups a second a provider gets when its lookup_rate is not set:
// a reconciler catching up on a backlog must not spend the account's API budget that sends.
const defaultLookupRate = 5

// describe records the providers of a channel just built.
func (a *App) describe(ch commands.Channel, files []*ProviderFile) {
	for i, pf := range files {
		p := provider{name: pf.Name, typ: pf.Type, channel: ch.Name, breaker: pf.Breaker,
			recheck: pf.ReceiptTimeout, lookupRate: pf.LookupRate}
		if p.recheck == 0 {
			p.recheck = domain.DefaultReceiptTimeout
		}
		if p.lookupRate == 0 {
			p.lookupRate = defaultLookupRate
		}
		if i < len(ch.Providers) {
			s := ch.Providers[i]
			if w, ok := s.(*receiptWindows); ok {
				s = w.Sender
			}
			p.receipts, _ = s.(httpapi.ReceiptParser)
			p.lookup, _ = s.(commands.Lookup)
		}
		a.providers = append(a.providers, p)
	}
}

// smsChannel builds the SMS channel, a Twilio or Vonage account per provider, in failover order.
// Providers call back {public_url}/v1/receipts/{provider}.
func (a *App) smsChannel(providers []*ProviderFile) (commands.Channel, error) {
	senders := make([]commands.Sender, len(providers))
	callback := func(name string) string {
		if a.publicURL == "" {
			return ""
		}
		return strings.TrimSuffix(a.publicURL, "/") + "/v1/receipts/" + name
	}
	for i, p := range providers {
		var s commands.Sender
		var err error
		switch p.Type {
		case TypeTwilio:
			s, err = twilio.New(twilio.Config{Provider: p.Name, BaseURL: p.BaseURL, AccountSID: p.AccountSID, AuthToken: p.AuthToken,
				From: p.From, StatusCallback: callback(p.Name), Timeout: p.Timeout, DeliveredOn: p.DeliveredOn})
		case TypeVonage:
			cb := callback(p.Name)
			if cb != "" && p.CallbackToken != "" {
				cb += "?token=" + url.QueryEscape(p.CallbackToken)
			}
			s, err = vonage.New(vonage.Config{Provider: p.Name, BaseURL: p.BaseURL, APIKey: p.APIKey, APISecret: p.APISecret,
				From: p.From, Callback: cb, CallbackToken: p.CallbackToken, Timeout: p.Timeout, DeliveredOn: p.DeliveredOn})
		default:
			err = fmt.Errorf("type %s does not send SMS", p.Type)
		}
		if err != nil {
			return commands.Channel{}, fmt.Errorf("provider %s: %w", p.Name, err)
		}
		if p.ReceiptTimeout > 0 || p.ReceiptMaxWait > 0 {
			s = &receiptWindows{Sender: s, timeout: p.ReceiptTimeout, maxWait: p.ReceiptMaxWait}
		}
		senders[i] = s
	}
	return sms.Channel(senders...), nil
}

// receiptWindows gives a provider's acceptances its receipt_timeout and receipt_max_wait.
type receiptWindows struct {
	commands.Sender
	timeout, maxWait time.Duration
}

// Send implements commands.Sender.
func (w *receiptWindows) Send(ctx context.Context, msg commands.WorkMessage) domain.Outcome {
	o := w.Sender.Send(ctx, msg)
	if o.Kind == domain.OutcomeAccepted {
		o.ReceiptTimeout, o.ReceiptMaxWait = w.timeout, w.maxWait
	}
	return o
}
