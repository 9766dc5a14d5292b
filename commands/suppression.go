package commands

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// RecipientRef is a recipient as the suppression list and the preferences key it: its channel
// and its channel's normal form (Channels.Normalize).
type RecipientRef struct {
	Channel   string
	Recipient string
}

// SuppressionFilter narrows a page of a tenant's suppression list.
type SuppressionFilter struct {
	// Channel and Recipient (in its normal form), when set, select one channel or one recipient.
	Channel   string
	Recipient string
	// IncludeRemoved lists removed entries too.
	IncludeRemoved bool
	// Cursor continues a page (the NextCursor of the one before); Limit bounds it.
	Cursor string
	Limit  int
}

// SuppressionStore keeps the tenants' suppression lists and their recipients' preferences.
// postgres.SuppressionStore implements it. An entry that the provider's evidence adds is
// written by the event store itself, in the transaction of the event that is its evidence
// (a dead letter whose data says suppresses), so it is in the list exactly when that event is.
type SuppressionStore interface {
	// Blocks returns, for each of refs in order, what stops a delivery to it: its active
	// suppression list entry, else its opt-out of category ("" or a required category: no
	// preference applies). One index probe per recipient.
	Blocks(ctx context.Context, tenant, category string, refs []RecipientRef) ([]domain.Block, error)
	// AddSuppression adds an entry unless one is active for its recipient: then it returns
	// that one and created=false, changing nothing.
	AddSuppression(ctx context.Context, s domain.Suppression) (entry domain.Suppression, created bool, err error)
	// RemoveSuppression removes an active entry, recording who and why; an entry removed
	// before is returned as it is. ErrNotFound when the tenant has no such entry.
	RemoveSuppression(ctx context.Context, tenant, id, actor, reason string, at time.Time) (domain.Suppression, error)
	// Suppression returns one entry, or ErrNotFound.
	Suppression(ctx context.Context, tenant, id string) (domain.Suppression, error)
	// ListSuppressions returns a page of entries, newest first, and the cursor of the next
	// page ("" at the end).
	ListSuppressions(ctx context.Context, tenant string, f SuppressionFilter) ([]domain.Suppression, string, error)
	// SetPreference records a preference, as an event, unless it is already so; it returns the
	// preference as it stands.
	SetPreference(ctx context.Context, tenant string, p domain.Preference) (domain.Preference, error)
	// Preferences returns a recipient's preferences on a channel, by category.
	Preferences(ctx context.Context, tenant, channel, recipient string) ([]domain.Preference, error)
}

// Category is a notification category the configuration declares (`categories:` in the file).
type Category struct {
	// Required categories (security, legal) cannot be opted out of: only the suppression list
	// stops their deliveries.
	Required bool
}

// Categories are the declared categories by name. An accept that names another is refused.
type Categories map[string]Category

// ErrSuppressionInvalid marks a suppression or preference request the ledger refuses; it is
// always an *InvalidField naming the member.
var ErrSuppressionInvalid = errors.New("invalid suppression request")

// ErrCategoryRequired: an opt-out of a required category was asked for.
var ErrCategoryRequired = errors.New("a required category cannot be opted out of")

// Suppressions is the use case of the suppression list and the preferences: it normalises the
// recipient as its channel does, checks the category, and keeps the record through the store.
type Suppressions struct {
	store      SuppressionStore
	channels   *Channels
	categories Categories
	clock      Clock
}

// NewSuppressions builds the use case.
func NewSuppressions(store SuppressionStore, channels *Channels, categories Categories, clock Clock) *Suppressions {
	return &Suppressions{store: store, channels: channels, categories: categories, clock: clock}
}

// Store is the store the use case keeps its record in.
func (s *Suppressions) Store() SuppressionStore { return s.store }

// Ref returns the key of a recipient on a channel, refusing an unknown channel or an empty
// recipient as an *InvalidField (channel, recipient).
func (s *Suppressions) Ref(channel, recipient string) (RecipientRef, error) {
	if _, ok := s.channels.Lookup(channel); !ok {
		return RecipientRef{}, &InvalidField{Field: "channel", Reason: fmt.Sprintf("unknown channel %q; this ledger serves %s",
			channel, strings.Join(s.channels.Names(), ", "))}
	}
	if strings.TrimSpace(recipient) == "" {
		return RecipientRef{}, &InvalidField{Field: "recipient", Reason: "required"}
	}
	return RecipientRef{Channel: channel, Recipient: s.channels.Normalize(channel, recipient)}, nil
}

// Add puts a recipient on the tenant's suppression list by hand (source manual or import).
func (s *Suppressions) Add(ctx context.Context, tenant, channel, recipient, reason, actor, source string) (domain.Suppression, bool, error) {
	ref, err := s.Ref(channel, recipient)
	if err != nil {
		return domain.Suppression{}, false, err
	}
	if source == "" {
		source = domain.SuppressionManual
	}
	return s.store.AddSuppression(ctx, domain.Suppression{
		Tenant: tenant, Channel: ref.Channel, Recipient: ref.Recipient, Source: source, Reason: reason,
		Evidence: domain.SuppressionEvidence{Actor: actor}, CreatedAt: s.clock.Now(),
	})
}

// Remove takes an entry off the list.
func (s *Suppressions) Remove(ctx context.Context, tenant, id, actor, reason string) (domain.Suppression, error) {
	return s.store.RemoveSuppression(ctx, tenant, id, actor, reason, s.clock.Now())
}

// SetPreference records a recipient's opt-out of (or back into) a declared category.
func (s *Suppressions) SetPreference(ctx context.Context, tenant string, p domain.Preference) (domain.Preference, error) {
	ref, err := s.Ref(p.Channel, p.Recipient)
	if err != nil {
		return domain.Preference{}, err
	}
	c, ok := s.categories[p.Category]
	switch {
	case p.Category == "":
		return domain.Preference{}, &InvalidField{Field: "category", Reason: "required"}
	case !ok:
		return domain.Preference{}, &InvalidField{Field: "category", Reason: s.categories.undeclaredText(p.Category)}
	case c.Required && p.OptedOut:
		return domain.Preference{}, fmt.Errorf("%w: %w", ErrCategoryRequired, &InvalidField{Field: "category",
			Reason: fmt.Sprintf("%q is a required category (security, legal): it cannot be opted out of", p.Category)})
	}
	p.Channel, p.Recipient, p.UpdatedAt = ref.Channel, ref.Recipient, s.clock.Now()
	if p.Source == "" {
		p.Source = domain.PreferenceByAPI
	}
	return s.store.SetPreference(ctx, tenant, p)
}

// Preferences returns a recipient's preferences.
func (s *Suppressions) Preferences(ctx context.Context, tenant, channel, recipient string) ([]domain.Preference, error) {
	ref, err := s.Ref(channel, recipient)
	if err != nil {
		return nil, err
	}
	return s.store.Preferences(ctx, tenant, ref.Channel, ref.Recipient)
}

// Check refuses a category that is not declared; "" is no category.
func (c Categories) Check(category string) error {
	if _, ok := c[category]; ok || category == "" {
		return nil
	}
	return &InvalidField{Field: "category", Reason: c.undeclaredText(category)}
}

func (s *Suppressions) undeclared(category string) string {
	return s.categories.undeclaredText(category)
}

func (c Categories) undeclaredText(category string) string {
	if len(c) == 0 {
		return fmt.Sprintf("%q is not declared: this ledger declares no categories (categories: in its configuration file)", category)
	}
	names := slices.Sorted(maps.Keys(c))
	return fmt.Sprintf("%q is not declared; the configuration declares %s", category, strings.Join(names, ", "))
}

// preferenceCategory is the category whose opt-outs apply to a delivery: none for a required one.
func (c Categories) preferenceCategory(category string) string {
	if c[category].Required {
		return ""
	}
	return category
}

// ProbingLoader loads a delivery's stream and probes its recipient's suppression in one round
// trip (postgres.EventStore): the start of an attempt needs both.
type ProbingLoader interface {
	// LoadProbing is EventStore.Load and SuppressionStore.Blocks of one recipient at once.
	LoadProbing(ctx context.Context, deliveryID, tenant, category string, ref RecipientRef) ([]domain.Event, domain.Block, error)
}

// SuppressionCheck is what the accept and the start of an attempt ask before a delivery may go
// out: the store, the channels' normal forms and the categories.
type SuppressionCheck struct {
	Store      SuppressionStore
	Categories Categories
	// Loader, when set, lets the start of an attempt read the stream and probe its recipient
	// in one round trip; without it the probe is a query of its own.
	Loader ProbingLoader
	// OnSuppressed, when set, is told of every delivery the check suppressed (metrics): its
	// channel, and by suppression or preference.
	OnSuppressed func(channel, by string)
}

// blocks probes the deliveries' recipients (refs) under the delivery's category.
func (c *SuppressionCheck) blocks(ctx context.Context, tenant, category string, refs []RecipientRef) ([]domain.Block, error) {
	if c == nil || c.Store == nil || len(refs) == 0 {
		return make([]domain.Block, len(refs)), nil
	}
	blocks, err := c.Store.Blocks(ctx, tenant, c.Categories.preferenceCategory(category), refs)
	if err != nil {
		return nil, fmt.Errorf("suppression check: %w", err)
	}
	if len(blocks) != len(refs) {
		return nil, fmt.Errorf("suppression check: %d answers for %d recipients", len(blocks), len(refs))
	}
	return blocks, nil
}

// preload reads the stream of the message's delivery with the probe of its recipient (Loader),
// or returns nil when there is no Loader.
func (c *SuppressionCheck) preload(ctx context.Context, msg WorkMessage) (*domain.Delivery, *domain.Block, error) {
	if c == nil || c.Store == nil || c.Loader == nil {
		return nil, nil, nil
	}
	key := msg.RecipientKey
	if key == "" {
		key = msg.Recipient
	}
	events, block, err := c.Loader.LoadProbing(ctx, msg.DeliveryID, msg.Tenant, c.Categories.preferenceCategory(msg.Category),
		RecipientRef{Channel: msg.Channel, Recipient: key})
	if err != nil {
		return nil, nil, err
	}
	d, err := domain.Rehydrate(events)
	if err != nil {
		return nil, nil, err
	}
	if d.Tenant() != msg.Tenant || d.Channel() != msg.Channel || d.RecipientKey() != key || d.Category() != msg.Category {
		return d, nil, nil // the message does not match its delivery: probe what the history says
	}
	return d, &block, nil
}

// counted tells OnSuppressed of a suppressed delivery.
func (c *SuppressionCheck) counted(channel, by string) {
	if c != nil && c.OnSuppressed != nil {
		c.OnSuppressed(channel, by)
	}
}

// Category returns a declared category, and false for one the configuration does not declare:
// what a one-click unsubscribe link, signed when the message went out, is checked against now.
func (s *Suppressions) Category(name string) (Category, bool) {
	c, ok := s.categories[name]
	return c, ok
}
