package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/mechanisms/breaker"
	"github.com/deliveryledger/ledger/adapters/providers/email"
	ptype "github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/adapters/unsubscribe"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// defaultFile is the configuration without a file: one webhook channel with one webhook
// provider, as the ledger has always run.
func defaultFile() *File {
	return &File{
		Channels: []ChannelFile{{Name: webhook.Name, Providers: []string{webhook.Name}}},
		Providers: map[string]*ProviderFile{webhook.Name: {Name: webhook.Name, Type: webhook.Name,
			Settings: &ptype.Settings{Name: webhook.Name, Values: map[string]any{}}}},
	}
}

// loadFile reads the configuration file the settings name, or gives the default.
func (c *Config) loadFile() (*File, error) {
	if c.ConfigFile == "" {
		return defaultFile(), nil
	}
	return LoadFile(c.ConfigFile, os.LookupEnv)
}

// registry builds the channels the file names, with their retry policies: each provider by its
// type (providerTypes), each channel by the unit its providers' type names.
func (a *App) registry(file *File) (*commands.Channels, map[string]domain.RetryPolicy, error) {
	hooks, hooksErr := a.webhookProcess()
	types := providerTypes(hooks, email.Process{Unsubscribe: a.unsubscribeLink})
	var channels []commands.Channel
	policies := map[string]domain.RetryPolicy{}
	var problems []error
	a.publicURL, a.providers = file.PublicURL, nil
	if a.logger != nil {
		for _, w := range slices.Concat(file.Warnings, unsubscribeWarnings(file, a.cfg.UnsubscribeSecret)) {
			a.logger.Warn("configuration file: " + w)
		}
	}
	for _, cf := range file.Channels {
		unit := unitOf(types, cf.Name)
		if unit == nil {
			problems = append(problems, fmt.Errorf("channel %q: unknown (known: %v)", cf.Name, channelNames(types)))
			continue
		}
		providers := make([]*ProviderFile, len(cf.Providers))
		senders := make([]commands.Sender, len(cf.Providers))
		built := true
		for i, name := range cf.Providers {
			providers[i] = file.Providers[name]
			s, err := a.sender(file, providers[i], types, hooksErr)
			if err != nil {
				problems = append(problems, err)
				built = false
			}
			senders[i] = s
		}
		if !built {
			continue
		}
		ch := unit(senders...)
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
				problems = append(problems, file.at(max(cf.RetryLine, cf.Line), "channels."+cf.Name+".retry", err))
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

// sender builds one provider by its type, each refusal at its line and key in the file. The
// type's checks run again first: they ran when the file was read, but the process's own settings
// (InFlight, the webhook settings) were not known then.
func (a *App) sender(file *File, pf *ProviderFile, types []ptype.Type, hooksErr error) (commands.Sender, error) {
	typ, ok := typeOf(types, pf.Type)
	if !ok {
		return nil, file.blame(pf, fmt.Errorf("unknown type %q (known: %s)", pf.Type, strings.Join(typeNames(types), ", ")))
	}
	if hooksErr != nil && typ.Name == webhook.Name {
		return nil, hooksErr
	}
	settings := *pf.Settings
	settings.InFlight, settings.Warnings = a.cfg.WorkerConcurrency, nil
	if typ.Check != nil {
		var problems []error
		for _, problem := range ptype.Problems(typ.Check(&settings)) {
			problems = append(problems, file.blame(pf, problem))
		}
		if len(problems) > 0 {
			return nil, errors.Join(problems...)
		}
	}
	s, err := typ.New(&settings)
	if err != nil {
		return nil, file.blame(pf, err)
	}
	timeout, maxWait := settings.Duration(ptype.ReceiptTimeout.Name), settings.Duration(ptype.ReceiptMaxWait.Name)
	if timeout > 0 || maxWait > 0 {
		s = &receiptWindows{Sender: s, timeout: timeout, maxWait: maxWait}
	}
	return s, nil
}

// unitOf is the channel unit of the types that serve channel, nil when none does.
func unitOf(types []ptype.Type, channel string) func(...commands.Sender) commands.Channel {
	for _, t := range types {
		if t.Channel == channel {
			return t.Unit
		}
	}
	return nil
}

// webhookProcess gathers the process-wide webhook settings every webhook provider takes: the
// SSRF allow list and the signing secrets; --webhook-timeout, when set, overrides a provider's
// timeout.
func (a *App) webhookProcess() (webhook.Process, error) {
	allow, err := webhook.ParseCIDRs(a.cfg.WebhookAllowCIDRs)
	if err != nil {
		return webhook.Process{}, fmt.Errorf("--webhook-allow-cidrs: %w", err)
	}
	secrets, err := webhook.ParseSecrets(a.cfg.WebhookSecrets)
	if err != nil {
		return webhook.Process{}, fmt.Errorf("--webhook-secrets: %w", err)
	}
	return webhook.Process{AllowCIDRs: allow, Secrets: secrets, Timeout: a.cfg.WebhookTimeout,
		Override: a.cfg.explicit["webhook-timeout"]}, nil
}

// CheckFile validates a configuration file without starting anything: it reads it, checks every
// key and value, reads the secrets it names from the environment, and builds every channel and
// provider from it (which checks their settings), then describes what it found.
func CheckFile(path string, cfg Config) ([]string, error) {
	return checkFile(path, cfg, os.LookupEnv)
}

// checkFile is CheckFile with the secrets read by getenv.
func checkFile(path string, cfg Config, getenv func(string) (string, bool)) ([]string, error) {
	file, err := LoadFile(path, getenv)
	if err != nil {
		return nil, err
	}
	if cfg.UnsubscribeSecret == "" {
		cfg.UnsubscribeSecret, _ = getenv(envUnsubscribeSecret)
	}
	if n := len(cfg.UnsubscribeSecret); n > 0 && n < unsubscribe.MinSecretLen {
		return nil, fmt.Errorf("%s is %d bytes: at least %d, or unset", envUnsubscribeSecret, n, unsubscribe.MinSecretLen)
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
		if p, ok := policies[name]; ok {
			retry = "retry " + p.String()
		}
		if p, ok := policies[name]; ok && p.RetryUnknown {
			retry += "; unknown: retry (possible duplicates marked)"
		}
		lines = append(lines, fmt.Sprintf("channel %s: providers %v; %s", name, providers, retry))
	}
	for _, w := range slices.Concat(file.Warnings, unsubscribeWarnings(file, cfg.UnsubscribeSecret)) {
		lines = append(lines, "warning: "+w)
	}
	for _, p := range a.providers {
		var notes []string
		if p.receipts != nil && !p.warned {
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
	// warned is true when the file's check warned about the provider (a Vonage account without
	// a callback token sends no callback URL).
	warned bool
}

// defaultLookupRate is the lookups a second a provider gets when its lookup_rate is not set:
// a reconciler catching up on a backlog must not spend the account's API budget that sends.
const defaultLookupRate = 5

// describe records the providers of a channel just built.
func (a *App) describe(ch commands.Channel, files []*ProviderFile) {
	for i, pf := range files {
		p := provider{name: pf.Name, typ: pf.Type, channel: ch.Name, breaker: pf.Breaker,
			recheck:    pf.Settings.Duration(ptype.ReceiptTimeout.Name),
			lookupRate: pf.Settings.Number(ptype.LookupRate.Name),
			warned:     len(pf.Settings.Warnings) > 0}
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
