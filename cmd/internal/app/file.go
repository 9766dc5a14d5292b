package app

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/deliveryledger/ledger/adapters/mechanisms/breaker"
	"github.com/deliveryledger/ledger/adapters/providers/email"
	ptype "github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/retention"
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
	// Categories are the notification categories a request may name (`category`), by name: a
	// recipient may opt out of any but a required one.
	Categories commands.Categories
	// Retention is how long history, payloads and accept answers stay in the hot store, and
	// where what leaves is archived (off by default: nothing leaves).
	Retention retention.Config
	// Path is where the file was read from ("" for the built-in default).
	Path string
	// Warnings are what runs but deserves a word: `ledger config check` prints them and the
	// ledger logs them at start.
	Warnings []string
	// root is the file's top mapping, for the lines of the wiring's refusals.
	root *yaml.Node
}

// categoryName is what a category name may be: it is part of unsubscribe tokens, metric labels
// and the preferences' key.
var categoryName = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)

// categories reads the categories block: `categories: {marketing: {}, account: {required: true}}`.
func (p *fileParser) categories(n *yaml.Node) commands.Categories {
	out := commands.Categories{}
	for _, kv := range p.mapping(n, "categories") {
		field := "categories." + kv.key
		if !categoryName.MatchString(kv.key) {
			p.fail(kv.keyNode, field, "a category name is lower-case letters, digits, _ and -, starting with a letter, at most 64 long")
			continue
		}
		var c commands.Category
		if kv.value.Kind == yaml.ScalarNode && (kv.value.Tag == "!!null" || kv.value.Value == "") {
			out[kv.key] = c
			continue
		}
		for _, ckv := range p.mapping(kv.value, field) {
			switch ckv.key {
			case "required":
				var required bool
				if err := ckv.value.Decode(&required); err != nil {
					p.fail(ckv.value, field+".required", "true or false")
				}
				c.Required = required
			default:
				p.unknown(ckv.keyNode, field+"."+ckv.key, "required")
			}
		}
		out[kv.key] = c
	}
	return out
}

// at is a refusal of the wiring at a line of the file, or without one for the built-in default.
func (f *File) at(line int, field string, err error) error {
	if f.Path == "" {
		return fmt.Errorf("%s: %w", field, err)
	}
	return fmt.Errorf("%s:%d: %s: %w", f.Path, line, field, err)
}

// blame is a provider's refusal at its line and key in the file.
func (f *File) blame(pf *ProviderFile, problem error) error {
	return blame(f.Path, f.root, pf, problem)
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
	// Line and RetryLine locate the channel and its retry block in the file (0 without one).
	Line, RetryLine int
}

// Unknown policies of a channel.
const (
	// UnknownHold keeps an unknown outcome unknown until a receipt, a lookup or an operator.
	UnknownHold = "hold"
	// UnknownRetry schedules the next attempt like after a transient failure, for receivers
	// that deduplicate on the delivery id; the history marks the retry a possible duplicate.
	UnknownRetry = "retry"
)

// ProviderFile is one provider of the file: its type and the settings of that type, as the
// type declares them (ptype.Type.Keys). Secret values have been read from the environment.
type ProviderFile struct {
	Name string
	// Type is the provider type's name (the block's type key).
	Type string
	// Settings are the block's keys and values, timeout included.
	Settings *ptype.Settings
	// Breaker is the provider's circuit breaker; zero fields take the defaults.
	Breaker breaker.Settings
	// at locates the block and its keys in the file, for the refusals of the wiring.
	at *blockLines
}

// blockLines are where a provider block and its keys are in the file.
type blockLines struct {
	block int
	keys  map[string]int
}

// line is the line of key, or of the block when key is not in it.
func (b *blockLines) line(key string) int {
	if b == nil {
		return 0
	}
	if l, ok := b.keys[key]; ok {
		return l
	}
	return b.block
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

// ParseFile is LoadFile on data already read. It checks every provider the file declares,
// whether a channel uses it or not, with its type's own checks (ptype.Type.Check).
func ParseFile(path string, data []byte, getenv func(string) (string, bool)) (*File, error) {
	p := &fileParser{path: path, getenv: getenv, types: providerTypes(webhook.Process{}, email.Process{})}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root yaml.Node
	if err := dec.Decode(&root); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &File{Path: path, Providers: map[string]*ProviderFile{}}
	if len(root.Content) == 0 {
		return nil, fmt.Errorf("%s: the file is empty", path)
	}
	// yaml.Unmarshal reads the first document and drops the rest: a second one (after ---)
	// would be ignored in silence, whatever it says.
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case err == nil:
		p.fail(&next, "(file)", "a second YAML document (after ---): the configuration is one document")
	case !errors.Is(err, io.EOF):
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	p.root = root.Content[0]
	f.root = p.root
	doc := p.mapping(p.root, "")
	var channels, providers *yaml.Node
	for _, kv := range doc {
		switch kv.key {
		case "public_url":
			f.PublicURL = p.str(kv.value, "public_url")
			if err := httpURL(f.PublicURL); err != nil {
				p.fail(kv.value, "public_url", "%v, such as https://ledger.example.com", err)
			}
		case "channels":
			channels = kv.value
		case "providers":
			providers = kv.value
		case "categories":
			f.Categories = p.categories(kv.value)
		case "retention":
			f.Retention = p.retention(kv.value)
		default:
			p.unknown(kv.keyNode, kv.key, "public_url, channels, providers, categories, retention")
		}
	}
	if providers != nil {
		for _, kv := range p.mapping(providers, "providers") {
			if kv.key == "" {
				p.fail(kv.keyNode, "providers", "a provider needs a name, the key its channels list it by")
				continue
			}
			if pf := p.provider(kv.key, kv.value, f.PublicURL); pf != nil {
				f.Providers[kv.key] = pf
				f.Warnings = append(f.Warnings, pf.Settings.Warnings...)
			}
		}
	}
	if channels == nil {
		p.fail(p.root, "channels", "required: the channels this ledger serves")
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
	path   string
	getenv func(string) (string, bool)
	// types are the provider types a block may name; root is the file's top mapping.
	types    []ptype.Type
	root     *yaml.Node
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
		if kn := n.Content[i]; kn.Kind != yaml.ScalarNode {
			p.fail(kn, orRoot(field), "want a name as a key, got %s", nodeKind(kn))
			continue
		}
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

// nodeKind names a node's kind in a refusal.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias"
	}
	return "a " + n.Tag
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

// envName is what an environment variable's name may be: a *_env value of another form is no
// name, and may well be the secret itself.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// secret reads the environment variable the *_env key at n names. A value that cannot be a
// variable's name is refused without being repeated: a refusal goes to stderr and the log.
func (p *fileParser) secret(n *yaml.Node, field string) string {
	name := p.str(n, field)
	if name == "" {
		return ""
	}
	if !envName.MatchString(name) {
		p.fail(n, field, "names no environment variable (is this the secret itself?): want the name of the variable that holds it, such as %s", envExample(field))
		return ""
	}
	v, ok := p.getenv(name)
	if !ok || v == "" {
		p.fail(n, field, "the environment variable %s is not set", name)
	}
	return v
}

// envExample is a variable's name for the key at field (providers.tg.token_env: TG_TOKEN).
func envExample(field string) string {
	parts := strings.Split(field, ".")
	name := strings.ToUpper(strings.TrimSuffix(parts[len(parts)-1], "_env"))
	if len(parts) == 3 {
		name = strings.ToUpper(parts[1]) + "_" + name
	}
	if !envName.MatchString(name) {
		return "LEDGER_SECRET"
	}
	return name
}

// provider parses one provider block: the keys every provider takes, then the keys its type
// declares, read by their kind, then the type's own checks.
func (p *fileParser) provider(name string, n *yaml.Node, publicURL string) *ProviderFile {
	field := "providers." + name
	kvs := p.mapping(n, field)
	pf := &ProviderFile{Name: name, at: &blockLines{block: n.Line, keys: map[string]int{}},
		Settings: &ptype.Settings{Name: name, PublicURL: publicURL, Values: map[string]any{}}}
	for _, kv := range kvs {
		if kv.key == "type" {
			pf.Type = p.str(kv.value, field+".type")
		}
	}
	names := typeNames(p.types)
	typ, known := typeOf(p.types, pf.Type)
	switch {
	case pf.Type == "":
		p.fail(n, field+".type", "required: one of %s", strings.Join(names, ", "))
		return nil
	case !known:
		p.fail(n, field+".type", "unknown type %q (known: %s)", pf.Type, strings.Join(names, ", "))
		return nil
	}
	refused := map[string]bool{} // the keys already refused, which the type's checks need not repeat
	before := len(p.problems)
	for _, kv := range kvs {
		f := field + "." + kv.key
		pf.at.keys[kv.key] = kv.value.Line
		key, declared := keyOf(typ, kv.key)
		switch {
		case kv.key == "type":
		case kv.key == "timeout":
			pf.Settings.Timeout = p.duration(kv.value, f)
		case kv.key == "breaker":
			pf.Breaker = p.breaker(kv.value, f)
		case secretKeys[kv.key] != "":
			p.fail(kv.keyNode, f, "secrets are not written in the file: name the environment variable that holds it with %s", secretKeys[kv.key])
		case !declared:
			known := append(slices.Clone(commonProviderKeys), keyNames(typ)...)
			p.unknown(kv.keyNode, f, strings.Join(known, ", "))
		default:
			pf.Settings.Values[kv.key] = p.value(key, kv.value, f)
		}
		if len(p.problems) > before {
			refused[kv.key], before = true, len(p.problems)
		}
	}
	for _, key := range typ.Keys {
		if key.Required && !p.has(kvs, key.Name) {
			p.fail(n, field+"."+key.Name, "%s", required(key, pf.Type))
			refused[key.Name] = true
		}
	}
	timeout, maxWait := pf.Settings.Duration(ptype.ReceiptTimeout.Name), pf.Settings.Duration(ptype.ReceiptMaxWait.Name)
	if timeout > 0 && maxWait > 0 && maxWait < timeout {
		p.fail(n, field+"."+ptype.ReceiptMaxWait.Name, "must be at least %s (%s)", ptype.ReceiptTimeout.Name, timeout)
	}
	if typ.Check != nil {
		for _, problem := range ptype.Problems(typ.Check(pf.Settings)) {
			if ke := (*ptype.KeyError)(nil); !errors.As(problem, &ke) || !refused[ke.Key] || ke.Root {
				p.problems = append(p.problems, p.blame(pf, problem))
			}
		}
	}
	return pf
}

// required is the refusal of a required key a block lacks.
func required(key ptype.Key, typ string) string {
	if key.Help != "" {
		return fmt.Sprintf("required for a provider of type %s: %s", typ, key.Help)
	}
	return "required for a provider of type " + typ
}

// value reads a declared key's value by its kind.
func (p *fileParser) value(key ptype.Key, n *yaml.Node, field string) any {
	switch key.Kind {
	case ptype.Int:
		before := len(p.problems)
		v := p.integer(n, field)
		if len(p.problems) == before && (v < key.Min || v > key.Max) {
			p.fail(n, field, "must be from %d to %d", key.Min, key.Max)
		}
		return v
	case ptype.Number:
		before := len(p.problems)
		v := p.number(n, field)
		if len(p.problems) == before && v <= 0 {
			p.fail(n, field, "must be positive (%s)", key.Help)
		}
		return v
	case ptype.Duration:
		return p.duration(n, field)
	case ptype.Secret:
		return p.secret(n, field)
	case ptype.URL:
		v := p.str(n, field)
		if err := httpURL(v); err != nil {
			p.fail(n, field, "%v", err)
		}
		return v
	}
	v := p.str(n, field)
	if len(key.Choices) > 0 && !slices.Contains(key.Choices, v) {
		want := strings.Join(key.Choices[:len(key.Choices)-1], ", ") + " or " + key.Choices[len(key.Choices)-1]
		if key.Help != "" {
			want = key.Help
		}
		p.fail(n, field, "want %s, got %q", want, v)
	}
	return v
}

// httpURL refuses what is not an absolute http(s) URL with a host, and a port no connection can
// use, which url.Parse takes (https://127.0.0.1:99999).
func httpURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" {
		return errors.New("want an absolute http(s) URL")
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("want an absolute http(s) URL: port %s is not from 1 to 65535", port)
		}
	}
	return nil
}

// blame gives a problem the type's checks found in a provider block its file, line and key.
func (p *fileParser) blame(pf *ProviderFile, problem error) error {
	return blame(p.path, p.root, pf, problem)
}

// blame says where a provider's problem is: the line and the key the file writes
// ("f.yaml:7: providers.tg.token_env: ..."), the block's when no key is to blame. path "" is the
// built-in default, which has no lines.
func blame(path string, root *yaml.Node, pf *ProviderFile, problem error) error {
	field, line, msg := "providers."+pf.Name, pf.at.line(""), problem.Error()
	var ke *ptype.KeyError
	if errors.As(problem, &ke) {
		switch {
		case ke.Root:
			field, line = ke.Key, rootLine(root, ke.Key)
		case ke.Key != "":
			field, line = field+"."+ke.Key, pf.at.line(ke.Key)
		}
		msg = strings.TrimPrefix(ke.Error(), ke.Key+": ")
	}
	if path == "" {
		return fmt.Errorf("%s: %s", field, msg)
	}
	return fmt.Errorf("%s:%d: %s: %s", path, line, field, msg)
}

// rootLine is the line of a top-level key, or the file's first when it has none.
func rootLine(root *yaml.Node, key string) int {
	if root == nil {
		return 0
	}
	for i := 0; root.Kind == yaml.MappingNode && i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == key {
			return root.Content[i+1].Line
		}
	}
	return root.Line
}

// number reads a finite number: strconv takes NaN and Inf, which pass every comparison a bound
// makes (NaN <= 0 is false) and would give a rate or a share no one can reach.
func (p *fileParser) number(n *yaml.Node, field string) float64 {
	v, err := strconv.ParseFloat(p.str(n, field), 64)
	switch {
	case err != nil && n.Kind == yaml.ScalarNode:
		p.fail(n, field, "want a number, got %q", n.Value)
	case err == nil && (math.IsNaN(v) || math.IsInf(v, 0)):
		p.fail(n, field, "want a finite number, got %s", n.Value)
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
	ch := ChannelFile{Name: name, Line: n.Line}
	var unknown *yaml.Node
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
					if item.Kind == yaml.ScalarNode && item.Tag != "!!null" {
						p.fail(item, fmt.Sprintf("%s[%d]", f, i), "want a provider's name, got an empty one")
					}
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
			ch.RetryLine = kv.value.Line
			ch.Retry = p.retry(kv.value, f)
		case "unknown":
			unknown = kv.value
			if ch.Unknown = p.str(kv.value, f); ch.Unknown != UnknownHold && ch.Unknown != UnknownRetry {
				p.fail(kv.value, f, "want hold (an unknown outcome waits for a receipt, a lookup or an operator) or retry (for receivers that deduplicate on the delivery id), got %q", ch.Unknown)
			}
		default:
			p.unknown(kv.keyNode, f, "providers, retry, unknown")
		}
	}
	takes := typesOf(p.types, name)
	switch {
	case len(takes) == 0:
		p.fail(n, field, "unknown channel %q (known: %s)", name, strings.Join(channelNames(p.types), ", "))
	case !p.hasKey(n, "providers"):
		p.fail(n, field+".providers", "required: the channel's providers, in failover order")
	}
	for i, pname := range ch.Providers {
		if pf := providers[pname]; len(takes) > 0 && pf != nil && !slices.Contains(takes, pf.Type) {
			p.fail(n, fmt.Sprintf("%s.providers[%d]", field, i), "provider %q is of type %s; the %s channel takes %s providers",
				pname, pf.Type, name, strings.Join(takes, " or "))
		}
	}
	if ch.Unknown == UnknownRetry {
		p.unknownRetry(unknown, field, ch, providers)
	}
	if ch.Unknown == "" {
		ch.Unknown = UnknownHold
	}
	return ch
}

// unknownRetry refuses `unknown: retry` on a channel with a provider whose receivers do not
// deduplicate on the delivery's id: after an unknown outcome the provider may have sent the
// message, and a retry, perhaps through the next provider, would send it again.
func (p *fileParser) unknownRetry(n *yaml.Node, field string, ch ChannelFile, providers map[string]*ProviderFile) {
	for _, pname := range ch.Providers {
		pf := providers[pname]
		if pf == nil {
			continue
		}
		if typ, ok := typeOf(p.types, pf.Type); ok && !typ.ReceiversDeduplicate {
			p.fail(n, field+".unknown", "retry is only for channels whose receivers deduplicate on the delivery id (webhook-id, Message-ID); the receivers of provider %q (type %s) do not, so a retry after an unknown outcome could send the message twice: use hold", pname, pf.Type)
			return
		}
	}
}

func (p *fileParser) hasKey(n *yaml.Node, key string) bool {
	for i := 0; n.Kind == yaml.MappingNode && i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return true
		}
	}
	return false
}

// retryStrategies are the strategies a channel's retry block names (strategy: NAME), the first
// the default (a block with a schedule and no strategy is a schedule): the keys each takes
// beside strategy, and how it is made from them. A new strategy is one type in domain and one
// entry here.
var retryStrategies = []retryStrategy{
	{"exponential", []string{"base", "cap", "max_attempts"}, func(r retryBlock) domain.RetryStrategy {
		return domain.Exponential{Base: r.base, Cap: r.cap}
	}},
	{"schedule", []string{"schedule"}, func(r retryBlock) domain.RetryStrategy { return domain.Schedule(r.schedule) }},
	{"quadratic", []string{"base", "cap", "max_attempts"}, func(r retryBlock) domain.RetryStrategy {
		return domain.Quadratic{Base: r.base, Cap: r.cap}
	}},
}

// retryStrategy is one strategy a retry block may name.
type retryStrategy struct {
	name string
	keys []string
	make func(r retryBlock) domain.RetryStrategy
}

// retryBlock is what a channel's retry block gives, with the nodes of the keys it has.
type retryBlock struct {
	base, cap   time.Duration
	schedule    []time.Duration
	maxAttempts int
	nodes       map[string]*yaml.Node
}

// retry parses a channel's retry block: a strategy (exponential, the default; schedule;
// quadratic) and its keys, each delay within what a delay queue holds, then the bounds of the
// policy as a whole (domain.RetryPolicy.Validate).
func (p *fileParser) retry(n *yaml.Node, field string) *domain.RetryPolicy {
	r := retryBlock{nodes: map[string]*yaml.Node{}}
	strategy := ""
	before := len(p.problems)
	for _, kv := range p.mapping(n, field) {
		f := field + "." + kv.key
		r.nodes[kv.key] = kv.keyNode
		switch kv.key {
		case "strategy":
			strategy = p.str(kv.value, f)
		case "base":
			r.base = p.retryDelay(kv.value, f)
		case "cap":
			r.cap = p.retryDelay(kv.value, f)
		case "max_attempts":
			if r.maxAttempts = p.integer(kv.value, f); r.maxAttempts < 1 || r.maxAttempts > domain.MaxAttemptsLimit {
				p.fail(kv.value, f, "must be from 1 to %d", domain.MaxAttemptsLimit)
			}
		case "schedule":
			if kv.value.Kind != yaml.SequenceNode || len(kv.value.Content) == 0 {
				p.fail(kv.value, f, "want a list of delays such as [1s, 4s, 9s]")
				continue
			}
			if len(kv.value.Content) > domain.MaxAttemptsLimit-1 {
				p.fail(kv.value, f, "%d delays: at most %d (n delays are n+1 attempts, at most %d)", len(kv.value.Content), domain.MaxAttemptsLimit-1, domain.MaxAttemptsLimit)
				continue
			}
			for i, item := range kv.value.Content {
				r.schedule = append(r.schedule, p.retryDelay(item, fmt.Sprintf("%s[%d]", f, i)))
			}
		default:
			p.unknown(kv.keyNode, f, "strategy, base, cap, max_attempts, schedule")
		}
	}
	if strategy == "" && r.nodes["strategy"] == nil {
		strategy = retryStrategies[0].name
		if r.nodes["schedule"] != nil {
			strategy = "schedule"
		}
	}
	i := slices.IndexFunc(retryStrategies, func(s retryStrategy) bool { return s.name == strategy })
	if i < 0 {
		var names []string
		for _, s := range retryStrategies {
			names = append(names, s.name)
		}
		p.fail(n, field+".strategy", "unknown strategy %q (known: %s)", strategy, strings.Join(names, ", "))
		return &domain.RetryPolicy{}
	}
	s := retryStrategies[i]
	var foreign []string
	for key := range r.nodes {
		if key != "strategy" && !slices.Contains(s.keys, key) {
			foreign = append(foreign, key)
		}
	}
	slices.Sort(foreign)
	switch {
	case s.name == "schedule" && len(foreign) > 0:
		p.fail(n, field, "a schedule gives its own delays and attempts (n delays, n+1 attempts): leave out %s", strings.Join(foreign, ", "))
	case len(foreign) > 0:
		p.fail(r.nodes[foreign[0]], field+"."+foreign[0], "strategy %s takes %s", s.name, strings.Join(s.keys, ", "))
	case s.name == "schedule" && r.nodes["schedule"] == nil:
		p.fail(n, field+".schedule", "required by strategy schedule: the delays after attempt 1, 2, ..., such as [1s, 4s, 9s]")
	}
	if s.name == "schedule" {
		r.maxAttempts = len(r.schedule) + 1
	} else {
		if r.base == 0 {
			r.base = domain.DefaultRetryBase
		}
		if r.cap == 0 && s.name == "exponential" {
			r.cap = max(domain.DefaultRetryCap, r.base)
		}
		if r.cap != 0 && r.cap < r.base {
			p.fail(n, field+".cap", "must be at least base (%s)", r.base)
		}
		if r.nodes["max_attempts"] == nil {
			r.maxAttempts = domain.DefaultMaxAttempts
		}
	}
	policy := &domain.RetryPolicy{Strategy: s.make(r), MaxAttempts: r.maxAttempts}
	if len(p.problems) == before {
		// What no one key shows: too many distinct waits, a square beyond the longest tier.
		for _, problem := range ptype.Problems(policy.Validate()) {
			p.fail(n, field, "%v", problem)
		}
	}
	return policy
}

// retryDelay reads a delay of a retry block: a duration a delay queue can hold.
func (p *fileParser) retryDelay(n *yaml.Node, field string) time.Duration {
	before := len(p.problems)
	d := p.duration(n, field)
	if len(p.problems) == before && (d < domain.MinRetryDelay || d > domain.MaxRetryDelay) {
		p.fail(n, field, "must be from %s to %s: each delay is a RabbitMQ queue's TTL, which counts whole milliseconds up to 2^32-1", domain.MinRetryDelay, domain.MaxRetryDelay)
	}
	return d
}
