package postgres

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// The suppression list and the preferences (migration 0016_suppressions): each change is an
// event of its own stream in recipient_events, written in the transaction that updates the
// current state in suppressions or preferences.

// suppressionsFromEvidence adds, for each dead letter whose data says suppresses, an entry for
// its delivery's recipient (the channel and recipient key of its accepted event), unless one is
// active: in the transaction of the event that is its evidence, so the entry is in the list
// exactly when the evidence is in the history. It never fails on a conflict: a recipient
// suppressed already (by another transaction, or by another row of this one) stays as it is.
const suppressionsFromEvidence = `WITH ev(delivery_id, version, provider, code) AS (
  SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[])
), added AS (
  INSERT INTO suppressions (id, tenant, channel, recipient, source, reason, evidence, created_at)
  SELECT gen_random_uuid(), a.tenant, a.data->>'channel',
         coalesce(a.data->>'recipient_key', a.data->>'recipient'), 'provider',
         'the provider answered ' || ev.code,
         jsonb_build_object('delivery_id', ev.delivery_id, 'event_version', ev.version,
                            'provider', ev.provider, 'provider_code', ev.code),
         $5
  FROM ev JOIN events a ON a.delivery_id = ev.delivery_id AND a.version = 1
  ORDER BY ev.delivery_id
  ON CONFLICT (tenant, channel, recipient) WHERE removed_at IS NULL DO NOTHING
  RETURNING id, tenant, channel, recipient, source, reason, evidence
)
INSERT INTO recipient_events (stream_id, version, tenant, type, idempotency_key, data, recorded_at)
SELECT id, 1, tenant, 'suppression.added', id::text || '/added',
       jsonb_build_object('channel', channel, 'recipient', recipient, 'source', source, 'reason', reason,
                          'evidence', evidence), $5
FROM added`

// writeSuppressions records the suppressions the events are evidence of (see
// suppressionsFromEvidence). Every write of events goes through appendEvents, as writeDue's.
func writeSuppressions(ctx context.Context, tx execer, events []domain.Event) error {
	var ids, providers, codes []string
	var versions []int32
	var at time.Time
	for _, e := range events {
		if e.Type != domain.EventDeadLettered || !bytes.Contains(e.Data, []byte(`"suppresses":true`)) {
			continue
		}
		var res domain.AttemptResult
		if err := json.Unmarshal(e.Data, &res); err != nil || !res.Suppresses {
			continue
		}
		ids, versions = append(ids, e.DeliveryID), append(versions, int32(e.Version))
		providers, codes = append(providers, res.Provider), append(codes, res.ProviderCode)
		at = e.RecordedAt
	}
	if len(ids) == 0 {
		return nil
	}
	_, err := tx.Exec(ctx, suppressionsFromEvidence, ids, versions, providers, codes, at)
	return err
}

// SuppressionStore keeps the tenants' suppression lists and preferences
// (commands.SuppressionStore).
type SuppressionStore struct {
	pool *pgxpool.Pool
}

var _ commands.SuppressionStore = (*SuppressionStore)(nil)

// NewSuppressionStore returns the store over pool.
func NewSuppressionStore(pool *pgxpool.Pool) *SuppressionStore { return &SuppressionStore{pool: pool} }

// blocksProbe finds, for each recipient ($2, $3), its active entry and its opt-out of $4 (none
// when $4 is empty): a probe of suppressions_active and of the preferences' key per recipient.
const blocksProbe = `SELECT r.i, s.id::text, s.source, s.reason, s.evidence, s.created_at, coalesce(p.opted_out, false)
FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS r(channel, recipient, i)
LEFT JOIN suppressions s ON s.tenant = $1 AND s.channel = r.channel AND s.recipient = r.recipient AND s.removed_at IS NULL
LEFT JOIN preferences p ON $4 <> '' AND p.tenant = $1 AND p.channel = r.channel AND p.recipient = r.recipient
  AND p.category = $4 AND p.opted_out
WHERE s.id IS NOT NULL OR p.opted_out`

// Blocks implements commands.SuppressionStore.
func (s *SuppressionStore) Blocks(ctx context.Context, tenant, category string, refs []commands.RecipientRef) ([]domain.Block, error) {
	channels, recipients := make([]string, len(refs)), make([]string, len(refs))
	for i, r := range refs {
		channels[i], recipients[i] = r.Channel, r.Recipient
	}
	rows, err := s.pool.Query(ctx, blocksProbe, tenant, channels, recipients, category)
	if err != nil {
		return nil, fmt.Errorf("probe suppressions: %w", err)
	}
	return scanBlocks(rows, tenant, category, refs)
}

// scanBlocks reads blocksProbe's rows into a block per ref, and closes them.
func scanBlocks(rows pgx.Rows, tenant, category string, refs []commands.RecipientRef) ([]domain.Block, error) {
	defer rows.Close()
	out := make([]domain.Block, len(refs))
	for rows.Next() {
		var i int
		var id, source, reason *string
		var evidence []byte
		var created *time.Time
		var optedOut bool
		if err := rows.Scan(&i, &id, &source, &reason, &evidence, &created, &optedOut); err != nil {
			return nil, fmt.Errorf("probe suppressions: %w", err)
		}
		if i < 1 || i > len(refs) {
			return nil, fmt.Errorf("probe suppressions: row for recipient %d of %d", i, len(refs))
		}
		b := &out[i-1]
		if id != nil {
			entry := domain.Suppression{ID: *id, Tenant: tenant, Channel: refs[i-1].Channel, Recipient: refs[i-1].Recipient,
				Source: *source, Reason: *reason, CreatedAt: created.UTC()}
			if err := json.Unmarshal(evidence, &entry.Evidence); err != nil {
				return nil, fmt.Errorf("probe suppressions: evidence of %s: %w", *id, err)
			}
			b.Suppression = &entry
		}
		if optedOut {
			b.OptedOut = category
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("probe suppressions: %w", err)
	}
	return out, nil
}

// LoadProbing implements commands.ProbingLoader: the delivery's stream and the probe of its
// recipient, in one round trip (a pipelined batch of the two queries), so that the check an
// attempt's start makes costs no round trip of its own.
func (s *EventStore) LoadProbing(ctx context.Context, deliveryID, tenant, category string, ref commands.RecipientRef) ([]domain.Event, domain.Block, error) {
	id, err := uuid.Parse(deliveryID)
	if err != nil {
		return nil, domain.Block{}, commands.ErrNotFound
	}
	batch := &pgx.Batch{}
	batch.Queue(eventsByDelivery, id.String())
	batch.Queue(blocksProbe, tenant, []string{ref.Channel}, []string{ref.Recipient}, category)
	results := s.pool.SendBatch(ctx, batch)
	defer results.Close()
	rows, err := results.Query()
	if err != nil {
		return nil, domain.Block{}, fmt.Errorf("load %s: %w", deliveryID, err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, domain.Block{}, fmt.Errorf("load %s: %w", deliveryID, err)
	}
	rows, err = results.Query()
	if err != nil {
		return nil, domain.Block{}, fmt.Errorf("probe suppressions: %w", err)
	}
	blocks, err := scanBlocks(rows, tenant, category, []commands.RecipientRef{ref})
	if err != nil {
		return nil, domain.Block{}, err
	}
	if err := results.Close(); err != nil {
		return nil, domain.Block{}, fmt.Errorf("load %s: %w", deliveryID, err)
	}
	if len(events) == 0 {
		return nil, domain.Block{}, commands.ErrNotFound
	}
	if err := s.attachPayloads(ctx, events); err != nil {
		return nil, domain.Block{}, err
	}
	return events, blocks[0], nil
}

var _ commands.ProbingLoader = (*EventStore)(nil)

const suppressionColumns = `id::text, tenant, channel, recipient, source, reason, evidence, created_at, removed_at, removed_by, removed_reason`

func scanSuppression(row pgx.Row) (domain.Suppression, error) {
	var e domain.Suppression
	var evidence []byte
	err := row.Scan(&e.ID, &e.Tenant, &e.Channel, &e.Recipient, &e.Source, &e.Reason, &evidence, &e.CreatedAt,
		&e.RemovedAt, &e.RemovedBy, &e.RemovedReason)
	if err != nil {
		return e, err
	}
	e.CreatedAt = e.CreatedAt.UTC()
	if e.RemovedAt != nil {
		at := e.RemovedAt.UTC()
		e.RemovedAt = &at
	}
	return e, json.Unmarshal(evidence, &e.Evidence)
}

// suppressionAdd adds an entry and its stream's first event unless the recipient has an active
// one (then nothing is written).
const suppressionAdd = `WITH added AS (
  INSERT INTO suppressions (id, tenant, channel, recipient, source, reason, evidence, created_at)
  VALUES (gen_random_uuid(), $1, $2, $3, $4, $5, $6, $7)
  ON CONFLICT (tenant, channel, recipient) WHERE removed_at IS NULL DO NOTHING
  RETURNING ` + suppressionColumns + `
), ev AS (
  INSERT INTO recipient_events (stream_id, version, tenant, type, idempotency_key, data, recorded_at)
  SELECT id::uuid, 1, tenant, 'suppression.added', id || '/added',
         jsonb_build_object('channel', channel, 'recipient', recipient, 'source', source, 'reason', reason,
                            'evidence', evidence), created_at
  FROM added
)
SELECT * FROM added`

const suppressionActive = `SELECT ` + suppressionColumns + ` FROM suppressions
WHERE tenant = $1 AND channel = $2 AND recipient = $3 AND removed_at IS NULL`

// AddSuppression implements commands.SuppressionStore.
func (s *SuppressionStore) AddSuppression(ctx context.Context, in domain.Suppression) (domain.Suppression, bool, error) {
	evidence, err := json.Marshal(in.Evidence)
	if err != nil {
		return domain.Suppression{}, false, err
	}
	for range 3 {
		e, err := scanSuppression(s.pool.QueryRow(ctx, suppressionAdd, in.Tenant, in.Channel, in.Recipient, in.Source,
			in.Reason, evidence, in.CreatedAt))
		if err == nil {
			return e, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return domain.Suppression{}, false, fmt.Errorf("add suppression: %w", err)
		}
		e, err = scanSuppression(s.pool.QueryRow(ctx, suppressionActive, in.Tenant, in.Channel, in.Recipient))
		if err == nil {
			return e, false, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return domain.Suppression{}, false, fmt.Errorf("add suppression: %w", err)
		}
		// The active entry was removed between the two statements: add again.
	}
	return domain.Suppression{}, false, fmt.Errorf("add suppression: the recipient's entry keeps changing")
}

// suppressionRemove ends an active entry and records its stream's second event.
const suppressionRemove = `WITH removed AS (
  UPDATE suppressions SET removed_at = $3, removed_by = $4, removed_reason = $5
  WHERE tenant = $1 AND id = $2::uuid AND removed_at IS NULL
  RETURNING ` + suppressionColumns + `
), ev AS (
  INSERT INTO recipient_events (stream_id, version, tenant, type, idempotency_key, data, recorded_at)
  SELECT id::uuid, 2, tenant, 'suppression.removed', id || '/removed',
         jsonb_build_object('actor', removed_by, 'reason', removed_reason), removed_at
  FROM removed
)
SELECT * FROM removed`

// RemoveSuppression implements commands.SuppressionStore.
func (s *SuppressionStore) RemoveSuppression(ctx context.Context, tenant, id, actor, reason string, at time.Time) (domain.Suppression, error) {
	if !isUUID(id) {
		return domain.Suppression{}, commands.ErrNotFound
	}
	e, err := scanSuppression(s.pool.QueryRow(ctx, suppressionRemove, tenant, id, at, actor, reason))
	if errors.Is(err, pgx.ErrNoRows) {
		return s.Suppression(ctx, tenant, id) // removed before, or no such entry
	}
	if err != nil {
		return domain.Suppression{}, fmt.Errorf("remove suppression %s: %w", id, err)
	}
	return e, nil
}

// Suppression implements commands.SuppressionStore.
func (s *SuppressionStore) Suppression(ctx context.Context, tenant, id string) (domain.Suppression, error) {
	if !isUUID(id) {
		return domain.Suppression{}, commands.ErrNotFound
	}
	e, err := scanSuppression(s.pool.QueryRow(ctx, `SELECT `+suppressionColumns+` FROM suppressions WHERE tenant = $1 AND id = $2::uuid`, tenant, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return domain.Suppression{}, commands.ErrNotFound
	}
	if err != nil {
		return domain.Suppression{}, fmt.Errorf("suppression %s: %w", id, err)
	}
	return e, nil
}

// suppressionsPage lists a tenant's entries newest first after the cursor ($5, $6).
const suppressionsPage = `SELECT ` + suppressionColumns + ` FROM suppressions
WHERE tenant = $1 AND ($2 = '' OR channel = $2) AND ($3 = '' OR recipient = $3) AND ($4 OR removed_at IS NULL)
  AND ($5::timestamptz IS NULL OR (created_at, id) < ($5, $6::uuid))
ORDER BY created_at DESC, id DESC LIMIT $7`

// ErrBadCursor: a list's cursor is not one this store gave.
var ErrBadCursor = errors.New("the cursor is not one a list page gave")

// ListSuppressions implements commands.SuppressionStore.
func (s *SuppressionStore) ListSuppressions(ctx context.Context, tenant string, f commands.SuppressionFilter) ([]domain.Suppression, string, error) {
	limit := f.Limit
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	var after *time.Time
	afterID := "00000000-0000-0000-0000-000000000000"
	if f.Cursor != "" {
		raw, err := base64.RawURLEncoding.DecodeString(f.Cursor)
		at, id, ok := strings.Cut(string(raw), "|")
		t, terr := time.Parse(time.RFC3339Nano, at)
		if err != nil || !ok || terr != nil || !isUUID(id) {
			return nil, "", fmt.Errorf("%w: %w", commands.ErrSuppressionInvalid, &commands.InvalidField{Field: "cursor", Reason: ErrBadCursor.Error()})
		}
		after, afterID = &t, id
	}
	rows, err := s.pool.Query(ctx, suppressionsPage, tenant, f.Channel, f.Recipient, f.IncludeRemoved, after, afterID, limit+1)
	if err != nil {
		return nil, "", fmt.Errorf("list suppressions: %w", err)
	}
	entries, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Suppression, error) { return scanSuppression(r) })
	if err != nil {
		return nil, "", fmt.Errorf("list suppressions: %w", err)
	}
	next := ""
	if len(entries) > limit {
		entries = entries[:limit]
		last := entries[limit-1]
		next = base64.RawURLEncoding.EncodeToString([]byte(last.CreatedAt.Format(time.RFC3339Nano) + "|" + last.ID))
	}
	return entries, next, nil
}

// preferenceSet records a preference and its stream's next event, unless it is already so.
const preferenceSet = `WITH up AS (
  INSERT INTO preferences AS p (tenant, channel, recipient, category, id, version, opted_out, source, actor, updated_at)
  VALUES ($1, $2, $3, $4, gen_random_uuid(), 1, $5, $6, $7, $8)
  ON CONFLICT (tenant, channel, recipient, category) DO UPDATE
    SET opted_out = EXCLUDED.opted_out, source = EXCLUDED.source, actor = EXCLUDED.actor,
        updated_at = EXCLUDED.updated_at, version = p.version + 1
    WHERE p.opted_out IS DISTINCT FROM EXCLUDED.opted_out
  RETURNING id, version, tenant, channel, recipient, category, opted_out, source, actor, updated_at
), ev AS (
  INSERT INTO recipient_events (stream_id, version, tenant, type, idempotency_key, data, recorded_at)
  SELECT id, version, tenant, 'preference.set', id::text || '/' || version,
         jsonb_build_object('channel', channel, 'recipient', recipient, 'category', category,
                            'opted_out', opted_out, 'source', source, 'actor', actor), updated_at
  FROM up
)
SELECT channel, recipient, category, opted_out, source, actor, updated_at FROM up`

const preferenceColumns = `channel, recipient, category, opted_out, source, actor, updated_at`

func scanPreference(row pgx.Row) (domain.Preference, error) {
	var p domain.Preference
	err := row.Scan(&p.Channel, &p.Recipient, &p.Category, &p.OptedOut, &p.Source, &p.Actor, &p.UpdatedAt)
	p.UpdatedAt = p.UpdatedAt.UTC()
	return p, err
}

// SetPreference implements commands.SuppressionStore.
func (s *SuppressionStore) SetPreference(ctx context.Context, tenant string, in domain.Preference) (domain.Preference, error) {
	p, err := scanPreference(s.pool.QueryRow(ctx, preferenceSet, tenant, in.Channel, in.Recipient, in.Category, in.OptedOut,
		in.Source, in.Actor, in.UpdatedAt))
	if errors.Is(err, pgx.ErrNoRows) {
		// Already so: nothing recorded, the preference as it stands.
		p, err = scanPreference(s.pool.QueryRow(ctx, `SELECT `+preferenceColumns+` FROM preferences
WHERE tenant = $1 AND channel = $2 AND recipient = $3 AND category = $4`, tenant, in.Channel, in.Recipient, in.Category))
	}
	if err != nil {
		return domain.Preference{}, fmt.Errorf("set preference: %w", err)
	}
	return p, nil
}

// Preferences implements commands.SuppressionStore.
func (s *SuppressionStore) Preferences(ctx context.Context, tenant, channel, recipient string) ([]domain.Preference, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+preferenceColumns+` FROM preferences
WHERE tenant = $1 AND channel = $2 AND recipient = $3 ORDER BY category`, tenant, channel, recipient)
	if err != nil {
		return nil, fmt.Errorf("preferences: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (domain.Preference, error) { return scanPreference(r) })
	if err != nil {
		return nil, fmt.Errorf("preferences: %w", err)
	}
	return out, nil
}

// isUUID reports whether s is a UUID in its canonical spelling: ids in paths and cursors that
// are not cannot name anything, and PostgreSQL would refuse some spellings uuid.Parse takes.
func isUUID(s string) bool {
	u, err := uuid.Parse(s)
	return err == nil && u.String() == s
}
