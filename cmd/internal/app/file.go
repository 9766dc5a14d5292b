package app

import (
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/deliveryledger/ledger/adapters/breaker"
	"github.com/deliveryledger/ledger/domain"
)

// File is the configuration file (--config / LEDGER_CONFIG): the channels a ledger serves,
// their providers in order, per-channel retry policies and the providers' settings. Secrets are
// never in it: a provider names the environment variable that holds each one (*_env keys).
//
//	public_url: https://ledger.example.com
//	channels:
//	  webhook:  {providers: [webhook]}
//	  email:    {providers: [smtp], retry: {schedule: [1m, 5m, 30m]}}
//	  sms:      {providers: [twilio, vonage], unknown: hold}
//	providers:
//	  webhook:  {type: webhook, timeout: 10s}
//	  smtp:     {type: smtp, host: 127.0.0.1, port: 2525, tls: starttls, from: "Ledger <noreply@example.com>"}
//	  twilio:   {type: twilio, account_sid: AC..., auth_token_env: TWILIO_AUTH_TOKEN, from: "+15005550006"}
type File struct {
	// PublicURL is the base URL providers call back (receipts).
	PublicURL string
	// Channels in the order of the file.
	Channels []ChannelFile
	// Providers by name.
	Providers map[string]*ProviderFile
	// Path is where the file was read from ("" for the built-in default).
	Path string
}

// ChannelFile is one channel of the file.
type ChannelFile struct {
	Name string
	// Providers names the channel's providers, in failover order.
	Providers []string
	// Retry replaces the server's retry policy for the channel; nil keeps it.
	Retry *domain.RetryPolicy
	// Unknown is what an unknown outcome leads to: UnknownHold (the default) or UnknownRetry.
	Unknown string
}

// Unknown policies of a channel.
const (
	// UnknownHold keeps an unknown outcome unknown until a receipt, a lookup or an operator.
	UnknownHold = "hold"
	// UnknownRetry schedules the next attempt like after a transient failure, for receivers
	// that deduplicate on the delivery id; the history marks the retry a possible duplicate.
	UnknownRetry = "retry"
)

// ProviderFile is one provider of the file: its type and the settings of that type. Secret
// values have been read from the environment.
type ProviderFile struct {
	Name    string
	Type    string
	Timeout time.Duration
	// smtp
	Host     string
	Port     int
	TLS      string
	Username string
	Password string
	From     string
	// telegram, twilio, vonage
	BaseURL string
	Token   string
	// twilio
	AccountSID string
	AuthToken  string
	LookupRate float64
	// vonage
	APIKey        string
	APISecret     string
	CallbackToken string
	// SMS: what counts as delivered, and how long to wait for a receipt.
	DeliveredOn    string
	ReceiptTimeout time.Duration
	ReceiptMaxWait time.Duration
	// Breaker is the provider's circuit breaker; zero fields take the defaults.
	Breaker breaker.Settings
}

// Provider types, and the channel each serves.
const (
	TypeWebhook  = "webhook"
	TypeSMTP     = "smtp"
	TypeTelegram = "telegram"
	TypeTwilio   = "twilio"
	TypeVonage   = "vonage"
)

// providerKeys are the keys each provider type takes, beside type and timeout. A key ending in
// _env names the environment variable holding a secret.
var providerKeys = map[string][]string{
	TypeWebhook:  {},
	TypeSMTP:     {"host", "port", "tls", "username", "password_env", "from"},
	TypeTelegram: {"base_url", "token_env"},
	TypeTwilio: {"base_url", "account_sid", "auth_token_env", "from", "delivered_on", "receipt_timeout",
		"receipt_max_wait", "lookup_rate"},
	TypeVonage: {"base_url", "api_key", "api_secret_env", "from", "callback_token_env", "delivered_on",
		"receipt_timeout", "receipt_max_wait"},
}

// commonProviderKeys are the keys every provider type takes.
var commonProviderKeys = []string{"type", "timeout", "breaker"}

// secretKeys are keys a provider may not take: a secret in the file would end up in version
// control, backups and logs.
var secretKeys = map[string]string{"password": "password_env", "token": "token_env", "auth_token": "auth_token_env",
	"api_secret": "api_secret_env", "callback_token": "callback_token_env", "secret": "a *_env key"}

// LoadFile reads and checks a configuration file. Every problem is reported at once, each with
// the file's name, the line and the field ("email.yaml:12: providers.smtp.port: ..."). getenv
// reads the secrets the file names (os.LookupEnv outside tests).
func LoadFile(path string, getenv func(string) (string, bool)) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read configuration file: %w", err)
	}
	return ParseFile(path, data, getenv)
}

// ParseFile is LoadFile on data already read.
func ParseFile(path string, data []byte, getenv func(string) (string, bool)) (*File, error) {
	p := &fileParser{path: path, getenv: getenv}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Path: path, Providers: map[string]*ProviderFile{}}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty", path)
	}
	doc := p.mapping(root.Content[0], "")
	var channels, providers *yaml.Node
	for _, kv := range doc {
		switch kv.key {
		case "public_url":
			f.PublicURL = p.str(kv.value, "public_url")
			if u, err := url.Parse(f.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.fail(kv.value, "public_url", "want an absolute http(s) URL such as https://ledger.example.com")
			}
		case "channels":
			channels = kv.value
		case "providers":
			providers = kv.value
		default:
			p.unknown(kv.keyNode, kv.key, "public_url, channels, providers")
		}
	}
	if providers != nil {
		for _, kv := range p.mapping(providers, "providers") {
			if pf := p.provider(kv.key, kv.value); pf != nil {
				f.Providers[kv.key] = pf
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(f.Providers)) {
		if pf := f.Providers[name]; pf.Type == TypeVonage && pf.DeliveredOn != "accept" && f.PublicURL == "" {
			p.fail(root.Content[0], "public_url", "required by provider %s: Vonage sends its receipts to {public_url}/v1/receipts/%s (or give it delivered_on: accept)", name, name)
		}
	}
	if channels == nil {
		p.fail(root.Content[0], "channels", "required: the channels this ledger serves")
	} else {
		for _, kv := range p.mapping(channels, "channels") {
			f.Channels = append(f.Channels, p.channel(kv.key, kv.value, f.Providers))
		}
	}
	if err := errors.Join(p.problems...); err != nil {
		return nil, err
	}
	return f, nil
}

// fileParser walks the YAML tree and collects every problem with its line.
type fileParser struct {
	path     string
	getenv   func(string) (string, bool)
	problems []error
}

type keyValue struct {
	key     string
	keyNode *yaml.Node
	value   *yaml.Node
}

func (p *fileParser) fail(n *yaml.Node, field, format string, args ...any) {
	p.problems = append(p.problems, fmt.Errorf("%s:%d: %s: %s", p.path, n.Line, field, fmt.Sprintf(format, args...)))
}

func (p *fileParser) unknown(n *yaml.Node, field, known string) {
	p.fail(n, field, "unknown key (known: %s)", known)
}

// mapping returns the keys and values of a mapping node in order; field names it in errors.
func (p *fileParser) mapping(n *yaml.Node, field string) []keyValue {
	if n.Kind != yaml.MappingNode {
		p.fail(n, orRoot(field), "want a mapping of keys to values")
		return nil
	}
	var out []keyValue
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i].Value
		if seen[k] {
			p.fail(n.Content[i], join(field, k), "given twice")
			continue
		}
		seen[k] = true
		out = append(out, keyValue{key: k, keyNode: n.Content[i], value: n.Content[i+1]})
	}
	return out
}

func orRoot(field string) string {
	if field == "" {
		return "(file)"
	}
	return field
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func (p *fileParser) str(n *yaml.Node, field string) string {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		p.fail(n, field, "want a string")
		return ""
	}
	return n.Value
}

func (p *fileParser) integer(n *yaml.Node, field string) int {
	v, err := strconv.Atoi(p.str(n, field))
	if err != nil && n.Kind == yaml.ScalarNode {
		p.fail(n, field, "want a whole number, got %q", n.Value)
	}
	return v
}

func (p *fileParser) duration(n *yaml.Node, field string) time.Duration {
	s := p.str(n, field)
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && n.Kind == yaml.ScalarNode:
		p.fail(n, field, "want a duration such as 10s or 1m30s, got %q", s)
	case err == nil && d <= 0:
		p.fail(n, field, "must be positive, got %s", s)
	}
	return d
}

// secret reads the environment variable the *_env key at n names.
func (p *fileParser) secret(n *yaml.Node, field string) string {
	name := p.str(n, field)
	if name == "" {
		return ""
	}
	v, ok := p.getenv(name)
	if !ok || v == "" {
		p.fail(n, field, "the environment variable %s is not set", name)
	}
	return v
}

// provider parses one provider block.
func (p *fileParser) provider(name string, n *yaml.Node) *ProviderFile {
	field := "providers." + name
	kvs := p.mapping(n, field)
	pf := &ProviderFile{Name: name}
	for _, kv := range kvs {
		if kv.key == "type" {
			pf.Type = p.str(kv.value, field+".type")
		}
	}
	keys, known := providerKeys[pf.Type]
	switch {
	case pf.Type == "":
		p.fail(n, field+".type", "required: one of webhook, smtp, telegram, twilio, vonage")
		return nil
	case !known:
		p.fail(n, field+".type", "unknown type %q (known: webhook, smtp, telegram, twilio, vonage)", pf.Type)
		return nil
	}
	for _, kv := range kvs {
		f := field + "." + kv.key
		switch {
		case kv.key == "type":
		case kv.key == "timeout":
			pf.Timeout = p.duration(kv.value, f)
		case kv.key == "breaker":
			pf.Breaker = p.breaker(kv.value, f)
		case secretKeys[kv.key] != "":
			p.fail(kv.keyNode, f, "secrets are not written in the file: name the environment variable that holds it with %s", secretKeys[kv.key])
		case !slices.Contains(keys, kv.key):
			p.unknown(kv.keyNode, f, strings.Join(append(slices.Clone(commonProviderKeys), keys...), ", "))
		case kv.key == "host":
			pf.Host = p.str(kv.value, f)
		case kv.key == "port":
			if pf.Port = p.integer(kv.value, f); pf.Port < 1 || pf.Port > 65535 {
				p.fail(kv.value, f, "must be from 1 to 65535")
			}
		case kv.key == "tls":
			if pf.TLS = p.str(kv.value, f); pf.TLS != "starttls" && pf.TLS != "implicit" && pf.TLS != "none" {
				p.fail(kv.value, f, "want starttls (required), implicit or none, got %q", pf.TLS)
			}
		case kv.key == "username":
			pf.Username = p.str(kv.value, f)
		case kv.key == "password_env":
			pf.Password = p.secret(kv.value, f)
		case kv.key == "from":
			pf.From = p.str(kv.value, f)
		case kv.key == "base_url":
			pf.BaseURL = p.str(kv.value, f)
			if u, err := url.Parse(pf.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				p.fail(kv.value, f, "want an absolute http(s) URL")
			}
		case kv.key == "token_env":
			pf.Token = p.secret(kv.value, f)
		case kv.key == "account_sid":
			pf.AccountSID = p.str(kv.value, f)
		case kv.key == "auth_token_env":
			pf.AuthToken = p.secret(kv.value, f)
		case kv.key == "api_key":
			pf.APIKey = p.str(kv.value, f)
		case kv.key == "api_secret_env":
			pf.APISecret = p.secret(kv.value, f)
		case kv.key == "callback_token_env":
			pf.CallbackToken = p.secret(kv.value, f)
		case kv.key == "delivered_on":
			if pf.DeliveredOn = p.str(kv.value, f); pf.DeliveredOn != "receipt" && pf.DeliveredOn != "accept" {
				p.fail(kv.value, f, "want receipt (delivered when a receipt or a lookup says so) or accept (delivered when the provider takes the message), got %q", pf.DeliveredOn)
			}
		case kv.key == "receipt_timeout":
			pf.ReceiptTimeout = p.duration(kv.value, f)
		case kv.key == "receipt_max_wait":
			pf.ReceiptMaxWait = p.duration(kv.value, f)
		case kv.key == "lookup_rate":
			if pf.LookupRate = p.number(kv.value, f); pf.LookupRate <= 0 {
				p.fail(kv.value, f, "must be positive (lookups a second)")
			}
		}
	}
	if pf.ReceiptTimeout > 0 && pf.ReceiptMaxWait > 0 && pf.ReceiptMaxWait < pf.ReceiptTimeout {
		p.fail(n, field+".receipt_max_wait", "must be at least receipt_timeout (%s)", pf.ReceiptTimeout)
	}
	switch pf.Type {
	case TypeSMTP:
		for key, missing := range map[string]bool{"host": pf.Host == "", "port": pf.Port == 0, "from": pf.From == ""} {
			if missing {
				p.fail(n, field+"."+key, "required for an smtp provider")
			}
		}
		if pf.TLS == "" {
			pf.TLS = "starttls"
		}
	case TypeTelegram:
		if pf.Token == "" && !p.has(kvs, "token_env") {
			p.fail(n, field+".token_env", "required: the environment variable holding the bot's token")
		}
	case TypeTwilio:
		p.require(n, kvs, field, "twilio", "account_sid", "auth_token_env", "from")
	case TypeVonage:
		p.require(n, kvs, field, "vonage", "api_key", "api_secret_env", "from")
		if pf.DeliveredOn != "accept" && !p.has(kvs, "callback_token_env") {
			p.fail(n, field+".callback_token_env", "required: the environment variable holding the secret Vonage's receipts carry in their URL (at least 16 characters), or delivered_on: accept")
		}
	}
	return pf
}

// require fails each of keys that a provider block lacks.
func (p *fileParser) require(n *yaml.Node, kvs []keyValue, field, typ string, keys ...string) {
	for _, key := range keys {
		if !p.has(kvs, key) {
			p.fail(n, field+"."+key, "required for a %s provider", typ)
		}
	}
}

func (p *fileParser) number(n *yaml.Node, field string) float64 {
	v, err := strconv.ParseFloat(p.str(n, field), 64)
	if err != nil && n.Kind == yaml.ScalarNode {
		p.fail(n, field, "want a number, got %q", n.Value)
	}
	return v
}

// breaker parses a provider's breaker block.
func (p *fileParser) breaker(n *yaml.Node, field string) breaker.Settings {
	var b breaker.Settings
	for _, kv := range p.mapping(n, field) {
		f := field + "." + kv.key
		switch kv.key {
		case "failures":
			if b.Failures = p.integer(kv.value, f); b.Failures < 1 {
				p.fail(kv.value, f, "must be at least 1 (consecutive failures that open the circuit)")
			}
		case "error_rate":
			if b.ErrorRate = p.number(kv.value, f); b.ErrorRate <= 0 || b.ErrorRate > 1 {
				p.fail(kv.value, f, "want a share of failed calls above 0 and at most 1, such as 0.5")
			}
		case "min_requests":
			if b.MinRequests = p.integer(kv.value, f); b.MinRequests < 1 {
				p.fail(kv.value, f, "must be at least 1")
			}
		case "window":
			b.Window = p.duration(kv.value, f)
		case "cooldown":
			b.Cooldown = p.duration(kv.value, f)
		case "probes":
			if b.Probes = p.integer(kv.value, f); b.Probes < 1 {
				p.fail(kv.value, f, "must be at least 1")
			}
		default:
			p.unknown(kv.keyNode, f, "failures, error_rate, min_requests, window, cooldown, probes")
		}
	}
	return b
}

func (p *fileParser) has(kvs []keyValue, key string) bool {
	return slices.ContainsFunc(kvs, func(kv keyValue) bool { return kv.key == key })
}

// channel parses one channel block.
func (p *fileParser) channel(name string, n *yaml.Node, providers map[string]*ProviderFile) ChannelFile {
	field := "channels." + name
	ch := ChannelFile{Name: name}
	for _, kv := range p.mapping(n, field) {
		f := field + "." + kv.key
		switch kv.key {
		case "providers":
			if kv.value.Kind != yaml.SequenceNode || len(kv.value.Content) == 0 {
				p.fail(kv.value, f, "want a list of provider names, in failover order")
				continue
			}
			for i, item := range kv.value.Content {
				pname := p.str(item, fmt.Sprintf("%s[%d]", f, i))
				if pname == "" {
					continue
				}
				if _, ok := providers[pname]; !ok {
					p.fail(item, fmt.Sprintf("%s[%d]", f, i), "no provider %q under providers", pname)
				}
				if slices.Contains(ch.Providers, pname) {
					p.fail(item, fmt.Sprintf("%s[%d]", f, i), "provider %q is listed twice", pname)
				}
				ch.Providers = append(ch.Providers, pname)
			}
		case "retry":
			ch.Retry = p.retry(kv.value, f)
		case "unknown":
			if ch.Unknown = p.str(kv.value, f); ch.Unknown != UnknownHold && ch.Unknown != UnknownRetry {
				p.fail(kv.value, f, "want hold (an unknown outcome waits for a receipt, a lookup or an operator) or retry (for receivers that deduplicate on the delivery id), got %q", ch.Unknown)
			}
		default:
			p.unknown(kv.keyNode, f, "providers, retry, unknown")
		}
	}
	kind, known := kindOf(name)
	switch {
	case !known:
		p.fail(n, field, "unknown channel %q (known: %s)", name, strings.Join(kindNames(), ", "))
	case !p.hasKey(n, "providers"):
		p.fail(n, field+".providers", "required: the channel's providers, in failover order")
	}
	for i, pname := range ch.Providers {
		if pf := providers[pname]; known && pf != nil && !slices.Contains(kind.providerTypes, pf.Type) {
			p.fail(n, fmt.Sprintf("%s.providers[%d]", field, i), "provider %q is of type %s; the %s channel takes %s providers",
				pname, pf.Type, name, strings.Join(kind.providerTypes, " or "))
		}
	}
	if ch.Unknown == "" {
		ch.Unknown = UnknownHold
	}
	return ch
}

func (p *fileParser) hasKey(n *yaml.Node, key string) bool {
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// retry parses a channel's retry block: exponential (base, cap, max_attempts) or an explicit
// schedule.
func (p *fileParser) retry(n *yaml.Node, field string) *domain.RetryPolicy {
	var policy domain.RetryPolicy
	var maxAttempts *yaml.Node
	for _, kv := range p.mapping(n, field) {
		f := field + "." + kv.key
		switch kv.key {
		case "base":
			policy.Base = p.duration(kv.value, f)
		case "cap":
			policy.Cap = p.duration(kv.value, f)
		case "max_attempts":
			maxAttempts = kv.value
			if policy.MaxAttempts = p.integer(kv.value, f); policy.MaxAttempts < 1 {
				p.fail(kv.value, f, "must be at least 1")
			}
		case "schedule":
			if kv.value.Kind != yaml.SequenceNode || len(kv.value.Content) == 0 {
				p.fail(kv.value, f, "want a list of delays such as [1s, 4s, 9s]")
				continue
			}
			for i, item := range kv.value.Content {
				policy.Schedule = append(policy.Schedule, p.duration(item, fmt.Sprintf("%s[%d]", f, i)))
			}
		default:
			p.unknown(kv.keyNode, f, "base, cap, max_attempts, schedule")
		}
	}
	switch {
	case len(policy.Schedule) > 0 && (policy.Base != 0 || policy.Cap != 0 || maxAttempts != nil):
		p.fail(n, field, "a schedule gives its own delays and attempts (n delays, n+1 attempts): leave out base, cap and max_attempts")
	case len(policy.Schedule) > 0:
		policy.MaxAttempts = len(policy.Schedule) + 1
	default:
		if policy.Base == 0 {
			policy.Base = domain.DefaultRetryBase
		}
		if policy.Cap == 0 {
			policy.Cap = max(domain.DefaultRetryCap, policy.Base)
		}
		if policy.Cap < policy.Base {
			p.fail(n, field+".cap", "must be at least base (%s)", policy.Base)
		}
		if maxAttempts == nil {
			policy.MaxAttempts = domain.DefaultMaxAttempts
		}
	}
	return &policy
}
