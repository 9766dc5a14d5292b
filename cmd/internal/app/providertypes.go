package app

import (
	"slices"

	"github.com/deliveryledger/ledger/adapters/providers/email"
	// ptype: this package's own provider is the wiring's record of a configured provider.
	ptype "github.com/deliveryledger/ledger/adapters/providers/provider"
	"github.com/deliveryledger/ledger/adapters/providers/telegram"
	"github.com/deliveryledger/ledger/adapters/providers/twilio"
	"github.com/deliveryledger/ledger/adapters/providers/vonage"
	"github.com/deliveryledger/ledger/adapters/providers/webhook"
)

// providerTypes are the provider types a configuration file may name, one line each, and
// through them the channels the ledger serves (each type names its channel and builds it). A
// new provider type, or a new channel with its first type, is its adapter package and one line
// here; the file's keys, checks and refusals, the channel's accept checks, queues, workers,
// limits and metrics follow from it. hooks and mail are the process's webhook and email settings
// (the zero values when a file is only parsed: they are not the file's).
func providerTypes(hooks webhook.Process, mail email.Process) []ptype.Type {
	return []ptype.Type{
		webhook.ProviderType(hooks),
		email.ProviderType(mail),
		telegram.ProviderType,
		twilio.ProviderType,
		vonage.ProviderType,
	}
}

// typeOf finds a provider type by name.
func typeOf(types []ptype.Type, name string) (ptype.Type, bool) {
	i := slices.IndexFunc(types, func(t ptype.Type) bool { return t.Name == name })
	if i < 0 {
		return ptype.Type{}, false
	}
	return types[i], true
}

// typeNames are the registered types' names, for refusals.
func typeNames(types []ptype.Type) []string {
	names := make([]string, len(types))
	for i, t := range types {
		names[i] = t.Name
	}
	return names
}

// channelNames are the channels the registered types serve, in the order of their first type.
func channelNames(types []ptype.Type) []string {
	var names []string
	for _, t := range types {
		if !slices.Contains(names, t.Channel) {
			names = append(names, t.Channel)
		}
	}
	return names
}

// typesOf names the types whose providers serve channel; none for a channel no type serves.
func typesOf(types []ptype.Type, channel string) []string {
	var names []string
	for _, t := range types {
		if t.Channel == channel {
			names = append(names, t.Name)
		}
	}
	return names
}

// keyOf finds a key a type declares.
func keyOf(t ptype.Type, name string) (ptype.Key, bool) {
	i := slices.IndexFunc(t.Keys, func(k ptype.Key) bool { return k.Name == name })
	if i < 0 {
		return ptype.Key{}, false
	}
	return t.Keys[i], true
}

// keyNames are the keys a type declares.
func keyNames(t ptype.Type) []string {
	names := make([]string, len(t.Keys))
	for i, k := range t.Keys {
		names[i] = k.Name
	}
	return names
}
