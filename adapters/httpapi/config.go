package httpapi

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/deliveryledger/ledger/adapters/unsubscribe"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// DefaultMaxBodyBytes bounds a request body when Config.MaxBodyBytes is zero. One MiB holds a
// generous notification payload fanned out to the maximum number of recipients, and keeps a
// single request from tying up a large amount of server memory.
const DefaultMaxBodyBytes int64 = 1 << 20

// maxRecipients bounds a fan-out: every recipient is an event and an outbox row written in one
// transaction, and that transaction must stay short enough not to stall the group of appends
// it shares the database with.
const maxRecipients = 1000

// maxIdempotencyKeyLen is the longest Idempotency-Key we store; longer keys are almost always a
// client putting a whole body or token in the header by mistake.
const maxIdempotencyKeyLen = 255

// Config configures the HTTP API.
type Config struct {
	// APIKeys maps a bearer key to the tenant it authenticates (see ParseAPIKeys). A request
	// under /v1 without one of these keys gets 401. An empty map is allowed, so a server
	// started without keys is still up for health checks, but it refuses every /v1 request.
	APIKeys map[string]string
	// MaxBodyBytes bounds a request body; a larger one gets 413. Zero means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Channels lists the channels the API accepts, each with the check its recipients and the
	// payload must pass (commands.Channels.Checks gives them from the registry). A request
	// naming another channel gets 400: we refuse at the door what no worker could ever deliver.
	Channels map[string]commands.Check
	// Normalize gives a recipient's normal form on a channel (commands.Channels.Normalize gives
	// it from the registry): a notification whose recipients repeat one (channel, normal form)
	// is refused with 400, since both would reach the same recipient. Nil compares recipients
	// as given.
	Normalize func(channel, recipient string) string

	// UnsubscribeSecret is the key the email messages' one-click unsubscribe links are signed
	// with (LEDGER_UNSUBSCRIBE_SECRET, at least unsubscribe.MinSecretLen bytes). With it and
	// Deps.Suppressions, GET and POST /u/{token} exist; without, they answer 404.
	UnsubscribeSecret []byte
}

// Validate reports every problem of the configuration at once, so an operator fixes them in
// one round instead of one per restart.
func (c Config) Validate() error {
	var problems []error
	if c.MaxBodyBytes < 0 {
		problems = append(problems, fmt.Errorf("max body bytes must not be negative, got %d", c.MaxBodyBytes))
	}
	if len(c.Channels) == 0 {
		problems = append(problems, errors.New("no channels configured: every accept request would be refused"))
	}
	for name, validate := range c.Channels {
		if name == "" {
			problems = append(problems, errors.New("a channel has an empty name"))
		}
		if validate == nil {
			problems = append(problems, fmt.Errorf("channel %q has no recipient validator", name))
		}
	}
	if n := len(c.UnsubscribeSecret); n > 0 && n < unsubscribe.MinSecretLen {
		problems = append(problems, fmt.Errorf("the unsubscribe secret is %d bytes: at least %d", n, unsubscribe.MinSecretLen))
	}
	for key, tenant := range c.APIKeys {
		if key == "" || tenant == "" {
			problems = append(problems, errors.New("an API key or its tenant is empty"))
			break
		}
	}
	return errors.Join(problems...)
}

func (c Config) withDefaults() Config {
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.Normalize == nil {
		c.Normalize = func(_, recipient string) string { return recipient }
	}
	return c
}

// Deps are the application services the API calls.
type Deps struct {
	// Accept records accept requests; required.
	Accept *commands.AcceptHandler
	// Events reads a tenant's delivery streams for the status and audit endpoints; required.
	Events EventReader
	// Requests looks up the stored answer of an accept request by Idempotency-Key, for
	// GET /v1/requests/{key}. Optional: when nil, that route does not exist.
	Requests RequestLookup
	// Views answers the list, DLQ and stats endpoints from the projections. Optional: when nil,
	// GET /v1/deliveries, GET /v1/dlq and GET /v1/stats do not exist.
	Views Views
	// Replay and Reconcile record an operator's decisions (POST /v1/deliveries/{id}/replay,
	// POST /v1/dlq/replay, POST /v1/deliveries/{id}/reconcile). Optional: when nil, those routes
	// do not exist; the DLQ replay needs Views too.
	Replay    *commands.ReplayHandler
	Reconcile *commands.ReconcileHandler
	// OperatorRequests keeps the answers of keyed DLQ replays (Idempotency-Key on POST
	// /v1/dlq/replay); required with Replay and Views.
	OperatorRequests commands.RequestStore
	// Cancel, when set, cancels deliveries (POST /v1/deliveries/{id}/cancel) and, with
	// Notifications, each delivery of a notification (POST /v1/notifications/{id}/cancel).
	Cancel        *commands.CancelHandler
	Notifications commands.NotificationDeliveries
	// ReplayJobs, when set, creates and shows replay jobs (POST /v1/replays, GET
	// /v1/replays/{id}, GET /v1/replays).
	ReplayJobs *commands.ReplayJobs
	// Receipts, when set, takes providers' callbacks at POST /v1/receipts/{provider}.
	Receipts *Receipts
	// Providers, when set, answers GET /v1/providers.
	Providers ProviderLister
	// Suppressions, when set, serves the suppression list (POST and GET /v1/suppressions,
	// GET and DELETE /v1/suppressions/{id}) and the preferences (PUT and GET /v1/preferences).
	Suppressions *commands.Suppressions
	// Ready checks the dependencies a request needs (database, broker) for /readyz. Nil means
	// always ready.
	Ready func(ctx context.Context) error
	// PaceAccept, when set, runs before an accept commits and may wait there (the ledger's
	// accept pacing: while more work waits for the workers than a bound, callers who wait for
	// their answer are slowed towards the delivery rate). It returns early when ctx ends.
	PaceAccept func(ctx context.Context)
}

// EventReader reads a tenant's delivery stream. postgres.EventStore implements it.
type EventReader interface {
	// LoadOf returns the stream in version order, or commands.ErrNotFound for an id that is
	// unknown or another tenant's (the same answer, after the same work: see
	// postgres.EventStore.LoadOf).
	LoadOf(ctx context.Context, tenant, deliveryID string) ([]domain.Event, error)
}

// Views is the read side the list endpoints need: pages of the projections' views, each with the
// position of the view it was read from. postgres.Views implements it.
type Views interface {
	// Deliveries lists a tenant's deliveries from the status view, newest first.
	Deliveries(ctx context.Context, tenant string, f projections.Filter) (projections.Page[projections.StatusRow], error)
	// DeadLetters lists a tenant's dead and unknown deliveries from the DLQ view, newest first.
	DeadLetters(ctx context.Context, tenant string, f projections.Filter) (projections.Page[projections.DLQRow], error)
	// Stats returns a tenant's counters.
	Stats(ctx context.Context, tenant string) (projections.Stats, error)
	// Minutes returns a tenant's deliveries accepted, delivered and dead per minute over the
	// hour up to now, from the status view.
	Minutes(ctx context.Context, tenant string) (projections.Minutes, error)
}

// RequestLookup returns the stored answer of the accept request a tenant made under an
// Idempotency-Key, as stored (commands.DecodeAcceptAnswer reads it), or commands.ErrNotFound.
// postgres.EventStore implements it.
type RequestLookup interface {
	RequestLookup(ctx context.Context, tenant, requestKey string) ([]byte, error)
}

// Validate reports every missing dependency at once.
func (d Deps) Validate() error {
	var problems []error
	if d.Accept == nil {
		problems = append(problems, errors.New("http api: no accept handler"))
	}
	if d.Events == nil {
		problems = append(problems, errors.New("http api: no event store"))
	}
	if d.Receipts != nil && d.Receipts.Record == nil {
		problems = append(problems, errors.New("http api: receipts without a handler to record them"))
	}
	if d.Replay != nil && d.Views != nil && d.OperatorRequests == nil {
		problems = append(problems, errors.New("http api: replays without a request store for their Idempotency-Keys"))
	}
	return errors.Join(problems...)
}

// ParseAPIKeys parses LEDGER_API_KEYS, "tenant:key,tenant2:key2", into a map from key to
// tenant, the direction a request is looked up in. A tenant may hold several keys (so a key can
// be rotated without downtime), but a key names one tenant only: a duplicate key is refused,
// because it would make one tenant's requests land in another's ledger. An empty string gives
// an empty map.
func ParseAPIKeys(s string) (map[string]string, error) {
	keys := make(map[string]string)
	if strings.TrimSpace(s) == "" {
		return keys, nil
	}
	var problems []error
	for i, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		tenant, key, ok := strings.Cut(pair, ":")
		tenant, key = strings.TrimSpace(tenant), strings.TrimSpace(key)
		switch {
		case pair == "":
			problems = append(problems, fmt.Errorf("api key pair %d is empty", i+1))
		case !ok:
			problems = append(problems, fmt.Errorf("api key pair %d is not tenant:key", i+1))
		case tenant == "":
			problems = append(problems, fmt.Errorf("api key pair %d has an empty tenant", i+1))
		case key == "":
			problems = append(problems, fmt.Errorf("api key pair %d (tenant %q) has an empty key", i+1, tenant))
		default:
			if other, dup := keys[key]; dup {
				// The key itself is a secret: name the pair and the tenants, never the key.
				problems = append(problems, fmt.Errorf("api key pair %d (tenant %q) repeats the key of tenant %q", i+1, tenant, other))
				continue
			}
			keys[key] = tenant
		}
	}
	if err := errors.Join(problems...); err != nil {
		return nil, err
	}
	return keys, nil
}
