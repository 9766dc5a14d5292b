package postgres

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
	"github.com/deliveryledger/ledger/projections"
)

// EventStore is the PostgreSQL event store. Unique constraints decide conflicts: (delivery_id,
// version) for optimistic concurrency, (delivery_id, idempotency_key) for dedupe (every key names
// its delivery, so the pair is as unique as the key: migration 0019; the key is kept without the
// delivery's id it begins with, keyStored).
type EventStore struct {
	pool *pgxpool.Pool
	// IdempotencyWindow, when set, is how long a tenant's accept answers count (retention.keep;
	// zero: for ever). An Idempotency-Key whose answer is older is a new request, and the key's
	// check reads only the partitions of accept_requests that the window reaches. Set it before
	// the store is used.
	IdempotencyWindow func(tenant string) time.Duration
}

// acceptSince is the oldest accept answer of tenant that still counts.
func (s *EventStore) acceptSince(tenant string, now time.Time) time.Time {
	if s.IdempotencyWindow != nil {
		if w := s.IdempotencyWindow(tenant); w > 0 {
			return now.Add(-w)
		}
	}
	return time.Time{}
}

// acceptSinces is acceptSince for each tenant, as the timestamptz[] of a statement (-infinity for
// no window).
func (s *EventStore) acceptSinces(tenants []string) []pgtype.Timestamptz {
	now := time.Now()
	out := make([]pgtype.Timestamptz, len(tenants))
	for i, t := range tenants {
		if since := s.acceptSince(t, now); since.IsZero() {
			out[i] = pgtype.Timestamptz{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
		} else {
			out[i] = pgtype.Timestamptz{Time: since, Valid: true}
		}
	}
	return out
}

var (
	_ commands.EventStore      = (*EventStore)(nil)
	_ commands.AcceptStore     = (*EventStore)(nil)
	_ commands.BatchEventStore = (*EventStore)(nil)
	_ commands.TenantLoader    = (*EventStore)(nil)
	_ projections.Log          = (*EventStore)(nil)
)

// NewEventStore returns a store over pool.
func NewEventStore(pool *pgxpool.Pool) *EventStore { return &EventStore{pool: pool} }

const sqlstateUniqueViolation = "23505"

// eventsInsert and eventsRows are the two halves of every multi-row event insert: the columns,
// and the arrays eventColumnsOf fills, one row per element.
const (
	eventsInsert = `INSERT INTO events (delivery_id, tenant, version, type, idempotency_key, data, recorded_at)`
	eventsRows   = `unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::jsonb[], $7::timestamptz[])`
)

const eventsAppend = eventsInsert + `
SELECT * FROM ` + eventsRows

// eventsExistingKeys counts the recorded events of the given (key, delivery) pairs: the key with
// its delivery, the events' unique key, which a partition holds whole.
const eventsExistingKeys = `SELECT count(*) FROM unnest($1::text[], $2::uuid[]) AS k(key, id)
JOIN events e ON e.idempotency_key = k.key AND e.delivery_id = k.id`

const eventColumns = `delivery_id::text, tenant, version, type, idempotency_key, data, recorded_at, position`

// eventsByDelivery and the other stream loads read the events as stored; attachPayloads then
// puts back the payloads kept apart, with a second query only when a stream has one.
const eventsByDelivery = `SELECT ` + eventColumns + ` FROM events WHERE delivery_id = $1 ORDER BY version`

// eventsByDeliveryOf is eventsByDelivery for one tenant. Its condition on the stream's owner is
// asked once, of the (delivery_id, tenant) index of accepted events (events_tenant_of_stream), and
// the stream is read only when it holds: another tenant's stream and no stream cost the same
// probe of that index and return the same nothing.
const eventsByDeliveryOf = `SELECT ` + eventColumns + ` FROM events WHERE delivery_id = $1
  AND EXISTS (SELECT 1 FROM events o WHERE o.delivery_id = $1 AND o.tenant = $2 AND o.version = 1)
  ORDER BY version`

const eventsByDeliveries = `SELECT ` + eventColumns + ` FROM events WHERE delivery_id = ANY($1::uuid[]) ORDER BY delivery_id, version`

// payloadsByNotification reads payloads kept apart, by notification and accept time (the time in
// its deliveries' ids): the condition on the time alone lets the executor read only the
// partitions of those times.
const payloadsByNotification = `SELECT p.notification_id, p.accepted_at, p.payload, coalesce(p.size, 0) FROM notification_payloads p
JOIN unnest($1::text[], $2::timestamptz[]) AS u(notification_id, accepted_at)
  ON p.notification_id = u.notification_id AND p.accepted_at = u.accepted_at
WHERE p.accepted_at = ANY($2::timestamptz[])`

// payloadApart is the field an accepted event that keeps its payload apart has in its data: a
// cheap search for it skips the decode of every other loaded event.
const payloadApart = `"payload_sha256"`

// apartRef returns the notification whose payload an accepted event keeps apart, or "".
func apartRef(e domain.Event) string {
	if e.Type != domain.EventAccepted || !bytes.Contains(e.Data, []byte(payloadApart)) {
		return ""
	}
	// The name may also stand inside a payload kept inline: only the top-level field counts.
	var a struct {
		NotificationID string `json:"notification_id"`
		PayloadSHA256  string `json:"payload_sha256"`
	}
	if json.Unmarshal(e.Data, &a) != nil || a.PayloadSHA256 == "" {
		return ""
	}
	return a.NotificationID
}

// attachPayloads puts the payload back into every accepted event that keeps it apart, so a loaded
// stream is the stream as the domain recorded it. Streams without one (every single-recipient
// notification) cost nothing more; the others one query for all of them.
func (s *EventStore) attachPayloads(ctx context.Context, events []domain.Event) error {
	refs := map[int]payloadRef{}
	var ids []string
	var times []time.Time
	for i, e := range events {
		if id := apartRef(e); id != "" {
			at, ok := UUIDv7Time(e.DeliveryID)
			if !ok {
				return fmt.Errorf("delivery %s: keeps its payload apart but its id is not a version 7 UUID", e.DeliveryID)
			}
			refs[i] = payloadRef{id, at.UnixMilli()}
			ids, times = append(ids, id), append(times, at)
		}
	}
	if len(ids) == 0 {
		return nil
	}
	rows, err := s.pool.Query(ctx, payloadsByNotification, ids, times)
	if err != nil {
		return fmt.Errorf("load payloads: %w", err)
	}
	type stored struct {
		body []byte // nil once expired
		size int
	}
	payloads := map[payloadRef]stored{}
	for rows.Next() {
		var id string
		var at time.Time
		var p stored
		if err := rows.Scan(&id, &at, &p.body, &p.size); err != nil {
			rows.Close()
			return fmt.Errorf("load payloads: %w", err)
		}
		payloads[payloadRef{id, at.UnixMilli()}] = p
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("load payloads: %w", err)
	}
	for i, ref := range refs {
		payload, ok := payloads[ref]
		switch {
		case !ok:
			return fmt.Errorf("delivery %s: the payload of notification %s is missing", events[i].DeliveryID, ref.notification)
		case payload.body == nil:
			events[i], err = domain.WithPayloadExpired(events[i], payload.size)
		default:
			events[i], err = domain.WithPayloadInline(events[i], payload.body)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// payloadRef names a payload kept apart: its notification and accept time (Unix ms), the key of
// notification_payloads.
type payloadRef struct {
	notification string
	acceptedMs   int64
}

// payloadsInsert keeps each accepted notification's payload once (migration 0007).
const payloadsInsert = `INSERT INTO notification_payloads (notification_id, accepted_at, tenant, sha256, payload)
SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::bytea[], $5::jsonb[])`

// payloadRows collects the notification_payloads rows of one write.
type payloadRows struct {
	ids, tenants, payloads []string
	times                  []time.Time
	hashes                 [][]byte
}

// apart returns the record's events with the accepted ones keeping their payload apart, and
// adds the notification's payload row to rows, for a notification of several deliveries: one
// delivery keeps its payload inline, which is as compact and costs no second read, unless the
// record asks for it apart (its payload may expire). A record without a payload keeps its
// events as they are.
func (rows *payloadRows) apart(rec commands.AcceptRecord) ([]domain.Event, error) {
	accepted := 0
	for _, e := range rec.Events {
		if e.Type == domain.EventAccepted {
			accepted++
		}
	}
	if len(rec.Payload) == 0 || accepted == 0 || accepted < 2 && !rec.PayloadApart {
		return rec.Events, nil
	}
	sum := sha256.Sum256(rec.Payload)
	hexSum := hex.EncodeToString(sum[:])
	events := make([]domain.Event, len(rec.Events))
	for i, e := range rec.Events {
		if e.Type != domain.EventAccepted {
			events[i] = e
			continue
		}
		var err error
		if events[i], err = domain.WithPayloadApart(e, hexSum); err != nil {
			return nil, err
		}
	}
	// One row per accept time of the deliveries (their ids' milliseconds), the time a load reads
	// it by: one row, as commands.Accept gives every delivery of a request the same time.
	seen := map[int64]bool{}
	for _, e := range events {
		if e.Type != domain.EventAccepted {
			continue
		}
		at, ok := UUIDv7Time(e.DeliveryID)
		if !ok {
			return nil, fmt.Errorf("delivery %s: its id is not a version 7 UUID, whose time places the payload", e.DeliveryID)
		}
		if seen[at.UnixMilli()] {
			continue
		}
		seen[at.UnixMilli()] = true
		rows.ids = append(rows.ids, rec.NotificationID)
		rows.times = append(rows.times, at)
		rows.tenants = append(rows.tenants, rec.Tenant)
		rows.hashes = append(rows.hashes, sum[:])
		rows.payloads = append(rows.payloads, string(rec.Payload))
	}
	return events, nil
}

// write queues the rows' insert on w.
func (rows *payloadRows) write(ctx context.Context, w execer) {
	if len(rows.ids) > 0 {
		_, _ = w.Exec(ctx, payloadsInsert, rows.ids, rows.times, rows.tenants, rows.hashes, rows.payloads)
	}
}

// eventsAppendEach writes the rows that fit and skips the others: a taken version or key (ON
// CONFLICT), or a missing previous version (a writer that did not load the stream must not start
// one or leave a gap in it). A taken version is also left out before the insert: a row that
// reaches it has its defaults evaluated, and pg_current_xact_id() gives the transaction an id and
// its commit a WAL flush even when ON CONFLICT then drops the row (the relay's queued marks, most
// of which the worker recorded first).
const eventsAppendEach = eventsInsert + `
SELECT u.* FROM ` + eventsRows + `
	AS u(delivery_id, tenant, version, type, idempotency_key, data, recorded_at)
WHERE (u.version = 1 OR EXISTS (SELECT 1 FROM events e WHERE e.delivery_id = u.delivery_id AND e.version = u.version - 1))
  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.delivery_id = u.delivery_id AND e.version = u.version)
ON CONFLICT DO NOTHING`

// Append writes events and outbox messages in one transaction.
func (s *EventStore) Append(ctx context.Context, events []domain.Event, outbox []commands.OutboxMessage) error {
	if len(events) == 0 && len(outbox) == 0 {
		return nil
	}
	var w writeBatch
	err := appendEvents(ctx, &w, events)
	if err == nil {
		err = publishOutbox(ctx, &w, outbox)
	}
	if err == nil {
		err = w.send(ctx, s.pool)
	}
	if err != nil && len(events) == 0 {
		return fmt.Errorf("write outbox: %w", err)
	}
	return s.translate(ctx, err, events)
}

func appendEvents(ctx context.Context, tx execer, events []domain.Event) error {
	if len(events) == 0 {
		return nil
	}
	columns, err := eventColumnsOf(events)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, eventsAppend, columns...); err != nil {
		return err
	}
	if err := writeDue(ctx, tx, events); err != nil {
		return err
	}
	return writeSuppressions(ctx, tx, events)
}

// eventColumnsOf turns events into the column arrays of eventsAppend, ordered by (delivery,
// version). Every multi-row insert takes its unique-index entries in that one order, so two
// transactions that insert rows of the same deliveries (a batch of worker records and a batch of
// the relay's queued records, say) wait for each other in one direction only and never deadlock:
// a deadlock costs a second (PostgreSQL's deadlock_timeout) before one of them is cancelled.
func eventColumnsOf(events []domain.Event) ([]any, error) {
	events = slices.Clone(events)
	slices.SortStableFunc(events, func(a, b domain.Event) int {
		if c := strings.Compare(a.DeliveryID, b.DeliveryID); c != 0 {
			return c
		}
		return a.Version - b.Version
	})
	n := len(events)
	ids, tenants, types, keys := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	versions, data, times := make([]int32, n), make([]string, n), make([]time.Time, n)
	for i, e := range events {
		key, err := keyStored(e.DeliveryID, e.Key)
		if err != nil {
			return nil, err
		}
		ids[i], tenants[i], versions[i], types[i] = e.DeliveryID, e.Tenant, int32(e.Version), string(e.Type)
		keys[i], data[i], times[i] = key, string(e.Data), e.RecordedAt
	}
	return []any{ids, tenants, versions, types, keys, data, times}, nil
}

// translate maps a failed append to the commands' errors: a unique violation is a duplicate when
// every key is already recorded, a version conflict otherwise.
func (s *EventStore) translate(ctx context.Context, err error, events []domain.Event) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlstateUniqueViolation {
		return fmt.Errorf("append to %s: %w", events[0].DeliveryID, err)
	}
	keys, ids := make([]string, len(events)), make([]string, len(events))
	for i, e := range events {
		keys[i], ids[i] = e.Key, e.DeliveryID
	}
	stored, kerr := keysStored(ids, keys)
	if kerr != nil { // the append could not have been sent
		return kerr
	}
	var existing int
	if qerr := s.pool.QueryRow(ctx, eventsExistingKeys, stored, ids).Scan(&existing); qerr != nil {
		return fmt.Errorf("append to %s: %w (checking keys: %v)", events[0].DeliveryID, commands.ErrVersionConflict, qerr)
	}
	if existing == len(events) {
		return commands.ErrDuplicate
	}
	return fmt.Errorf("append to %s at version %d: %w", events[0].DeliveryID, events[0].Version, commands.ErrVersionConflict)
}

// Load returns a delivery's stream in version order.
func (s *EventStore) Load(ctx context.Context, deliveryID string) ([]domain.Event, error) {
	return s.load(ctx, deliveryID, eventsByDelivery)
}

// LoadOf returns a delivery's stream if it belongs to tenant, and ErrNotFound otherwise: the
// answer for another tenant's id is the answer for an unknown one, after the same work (one
// probe of the stream owners' index, eventsByDeliveryOf), so its time tells nothing either.
func (s *EventStore) LoadOf(ctx context.Context, tenant, deliveryID string) ([]domain.Event, error) {
	return s.load(ctx, deliveryID, eventsByDeliveryOf, tenant)
}

func (s *EventStore) load(ctx context.Context, deliveryID, query string, args ...any) ([]domain.Event, error) {
	// uuid.Parse takes spellings PostgreSQL refuses ("urn:uuid:..."): send the canonical one.
	id, err := uuid.Parse(deliveryID)
	if err != nil {
		return nil, commands.ErrNotFound
	}
	rows, err := s.pool.Query(ctx, query, append([]any{id.String()}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", deliveryID, err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", deliveryID, err)
	}
	if len(events) == 0 {
		return nil, s.notFound(ctx, id.String(), args...)
	}
	if err := s.attachPayloads(ctx, events); err != nil {
		return nil, err
	}
	return events, nil
}

// archiveSegmentOf finds the archive segment that holds the deliveries of an accept time (and,
// given, a tenant): a handful of rows, one per partition that left.
const archiveSegmentOf = `SELECT id FROM archive_segments
WHERE (from_at IS NULL OR from_at <= $1) AND $1 < to_at AND ($2::text IS NULL OR $2 = ANY (tenants))
ORDER BY to_at LIMIT 1`

// notFound is the error of a load that found no rows: an *commands.ArchivedError when the id's
// accept time is in a segment that left for the archive (with one of the tenant's deliveries
// in it, for a tenant's load), else commands.ErrNotFound. An id that never existed but falls in
// an archived range of a tenant with deliveries there is answered archived too: the hot store
// no longer knows which ids the range held, and says so.
func (s *EventStore) notFound(ctx context.Context, id string, args ...any) error {
	at, ok := UUIDv7Time(id)
	if !ok {
		return commands.ErrNotFound
	}
	var tenant *string
	if len(args) > 0 {
		if t, ok := args[0].(string); ok {
			tenant = &t
		}
	}
	var segment string
	switch err := s.pool.QueryRow(ctx, archiveSegmentOf, at, tenant).Scan(&segment); {
	case errors.Is(err, pgx.ErrNoRows):
		return commands.ErrNotFound
	case err != nil:
		return fmt.Errorf("load %s: archive segment: %w", id, err)
	}
	return &commands.ArchivedError{DeliveryID: id, Segment: segment}
}

// LoadMany returns the streams of several deliveries at once, keyed by id; unknown ids are
// absent.
func (s *EventStore) LoadMany(ctx context.Context, ids []string) (map[string][]domain.Event, error) {
	valid := make([]string, 0, len(ids))
	for _, id := range ids {
		if u, err := uuid.Parse(id); err == nil {
			valid = append(valid, u.String())
		}
	}
	rows, err := s.pool.Query(ctx, eventsByDeliveries, valid)
	if err != nil {
		return nil, fmt.Errorf("load %d streams: %w", len(valid), err)
	}
	events, err := pgx.CollectRows(rows, scanEvent)
	if err != nil {
		return nil, fmt.Errorf("load %d streams: %w", len(valid), err)
	}
	if err := s.attachPayloads(ctx, events); err != nil {
		return nil, err
	}
	out := make(map[string][]domain.Event, len(valid))
	for _, e := range events {
		out[e.DeliveryID] = append(out[e.DeliveryID], e)
	}
	return out, nil
}

// AppendEach writes independent single events of many streams in one transaction; an event
// whose version or idempotency key is already taken is skipped (someone else recorded that
// transition, or moved the stream on). It returns how many were written.
func (s *EventStore) AppendEach(ctx context.Context, events []domain.Event) (int, error) {
	if len(events) == 0 {
		return 0, nil
	}
	columns, err := eventColumnsOf(events)
	if err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, eventsAppendEach, columns...)
	if err != nil {
		return 0, fmt.Errorf("append %d events: %w", len(events), err)
	}
	return int(tag.RowsAffected()), nil
}

func scanEvent(row pgx.CollectableRow) (domain.Event, error) {
	var e domain.Event
	var typ string
	err := row.Scan(&e.DeliveryID, &e.Tenant, &e.Version, &typ, &e.Key, &e.Data, &e.RecordedAt, &e.Position)
	e.Key = keyLoaded(e.DeliveryID, e.Key)
	e.Type = domain.EventType(typ)
	e.RecordedAt = e.RecordedAt.UTC()
	return e, err
}

// The ORDER BY names the table's columns: a bare transaction_id would be the text output column
// of the same name, and text order puts transaction 100000 before 99999.
const eventsReadLog = `SELECT ` + eventColumns + `, transaction_id::text FROM events
WHERE (transaction_id, position) > ($1::text::xid8, $2)
  AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
ORDER BY events.transaction_id, events.position
LIMIT $3`

// ReadLog returns up to limit events after `after`, in an order that never skips a row: only
// transactions below the oldest one still running are visible, so a transaction that took its
// position early but commits late is read when it commits, before anything after it.
func (s *EventStore) ReadLog(ctx context.Context, after projections.LogPosition, limit int) ([]projections.LoggedEvent, error) {
	rows, err := s.pool.Query(ctx, eventsReadLog, strconv.FormatUint(after.TransactionID, 10), after.Position, limit)
	if err != nil {
		return nil, fmt.Errorf("read log after %s: %w", after, err)
	}
	return pgx.CollectRows(rows, scanLogged)
}

const (
	acceptRequestLock = `SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0))`
	// acceptRequestGet reads the key's answer within the idempotency window ($3, -infinity for
	// none): one row, since a key is written again only once its earlier answer is out of it.
	acceptRequestGet = `SELECT request_hash, response FROM accept_requests WHERE tenant = $1 AND request_key = $2
  AND created_at >= $3 ORDER BY created_at DESC LIMIT 1`
	acceptRequestPut = `INSERT INTO accept_requests (tenant, request_key, request_hash, response) VALUES ($1, $2, $3, $4)`
)

// acceptRequestLockAll opens the write of new requests (newAccepts): it takes every key's advisory
// lock and fails with division_by_zero when another transaction holds one. Without it, the insert
// into accept_requests would wait on the unique index for a concurrent request of the same key
// until that request's transaction ends, and a whole group-commit batch would wait with it; with
// it, the batch fails at its first statement and the request gets ErrRequestInFlight at once. A
// try-lock answers false instead of failing, and only an error stops the statements queued after
// it: the division turns false into one. The divisor must depend on the locks: a constant 1/0
// (in a CASE, say) is folded by the planner and fails every execution.
const acceptRequestLockAll = `SELECT 1 / min(pg_try_advisory_xact_lock(hashtextextended(k, 0))::int)
FROM unnest($1::text[]) AS u(k)`

const sqlstateDivisionByZero = "22012"

// acceptRequestsAbsent follows acceptRequestLockAll in the write of new requests and fails with
// division_by_zero when a key is recorded already, in any partition of accept_requests: since the
// table is partitioned by created_at (migration 0019) its primary key holds created_at too, and
// no unique index refuses a second row of a key any more. It reads under the keys' locks,
// in a statement of its own, so it sees every request of those keys that has committed: a
// concurrent first use either holds a lock (and the write fails on it) or has committed (and
// this fails). It probes each partition's key index once per key (the LATERAL keeps it to
// probes: joined, a batch's keys were hashed against a scan of every row), and stops at a hit.
//
// Only answers within the key's idempotency window count (since: its tenant's keep back from now,
// -infinity without one): the executor prunes the partitions older than it for each key.
const acceptRequestsAbsent = `SELECT 1 / (NOT EXISTS (SELECT FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(tenant, request_key, since)
  CROSS JOIN LATERAL (SELECT FROM accept_requests r WHERE r.tenant = u.tenant AND r.request_key = u.request_key
    AND r.created_at >= u.since LIMIT 1) AS r))::int`

// acceptRequestsAbsentNotify is acceptRequestsAbsent that also notifies the relay ($4, the outbox's
// channel), for a write with outbox rows: the notification is sent only if the transaction
// commits, wherever in it it is raised, and a statement less goes with every accept.
const acceptRequestsAbsentNotify = acceptRequestsAbsent + `, pg_notify($4, '')`

// acceptWrite is the write of requests taken as new, of distinct keys: their locks, a check that
// no partition holds their keys, then their accept_requests rows, before the events and outbox
// rows are written and rolled back. A failure that keyTaken recognises leaves nothing written.
type acceptWrite struct {
	batch    writeBatch
	lockKeys []string
}

// newAccepts builds the write of recs, as new requests.
func (s *EventStore) newAccepts(ctx context.Context, recs []commands.AcceptRecord) (*acceptWrite, error) {
	n := len(recs)
	lockKeys, tenants, keys := make([]string, n), make([]string, n), make([]string, n)
	hashes, responses := make([][]byte, n), make([][]byte, n)
	var payloads payloadRows
	var events []domain.Event
	var outbox []commands.OutboxMessage
	for i, rec := range recs {
		lockKeys[i] = acceptLockKey(rec.Tenant, rec.RequestKey)
		tenants[i], keys[i], hashes[i], responses[i] = rec.Tenant, rec.RequestKey, rec.RequestHash, rec.Response
		apart, err := payloads.apart(rec)
		if err != nil {
			return nil, err
		}
		events = append(events, apart...)
		outbox = append(outbox, rec.Outbox...)
	}
	a := &acceptWrite{lockKeys: lockKeys}
	since := s.acceptSinces(tenants)
	w := &a.batch
	_, _ = w.Exec(ctx, acceptRequestLockAll, lockKeys)
	// The keys' check carries the relay's notification and the guards' probe: a key taken is
	// found first (its column comes first), a blocked recipient then.
	check, args := acceptRequestsAbsent, []any{tenants, keys, since}
	if len(outbox) > 0 {
		check, args = acceptRequestsAbsentNotify, append(args, OutboxNotifyChannel)
	}
	if guard, guardArgs := recipientsUnblockedColumn(recs, len(args)); guard != "" {
		check, args = check+", "+guard, append(args, guardArgs...)
	}
	_, _ = w.Exec(ctx, check, args...)
	_, _ = w.Exec(ctx, acceptRequestPutMany, tenants, keys, hashes, responses)
	if err := errors.Join(appendEvents(ctx, w, events), writeOutbox(ctx, w, outbox)); err != nil {
		return nil, err
	}
	payloads.write(ctx, w)
	return a, nil
}

// acceptPrepared, followed by a statement's text, marks in a connection's CustomData a statement
// of an acceptWrite that the connection has sent, and so holds prepared.
const acceptPrepared = "accept prepared: "

// send sends the write in one round trip on a connection that has sent its statements before.
// pgx prepares a statement new to a connection in an exchange of its own, before any statement
// of the batch runs, and PostgreSQL parses an insert only with a lock on its table: behind a
// stronger lock (a migration's, VACUUM FULL's) a repeat of a request in flight would wait there
// instead of failing on its key's lock. On any other connection the locks come first, in a
// transaction that the writes then join: a round trip more, once per connection and statement,
// as preparing costs anyway.
func (a *acceptWrite) send(ctx context.Context, pool *pgxpool.Pool) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	marks := conn.Conn().PgConn().CustomData()
	prepared := true
	for _, q := range a.batch.batch.QueuedQueries {
		_, ok := marks[acceptPrepared+q.SQL]
		prepared = prepared && ok
	}
	if prepared {
		defer conn.Release()
		return a.batch.send(ctx, conn)
	}
	var locks writeBatch
	locks.batch.Queue("BEGIN")
	_, _ = locks.Exec(ctx, acceptRequestLockAll, a.lockKeys)
	if err := locks.send(ctx, conn); err != nil {
		rollback(ctx, conn)
		return err
	}
	_, _ = a.batch.Exec(ctx, "COMMIT")
	err = a.batch.send(ctx, conn)
	if err == nil || keyTaken(err) { // the statements were prepared before one failed
		for _, q := range a.batch.batch.QueuedQueries {
			marks[acceptPrepared+q.SQL] = true
		}
	}
	if err != nil {
		rollback(ctx, conn)
		return err
	}
	conn.Release()
	return nil
}

// keyTaken reports whether the write of newAccepts failed because a key is in flight (its lock
// is held) or already recorded (acceptRequestsAbsent), or another unique row of the write exists: the requests then get
// their answers from the path that reads before it writes.
func keyTaken(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlstateDivisionByZero || pgErr.Code == sqlstateUniqueViolation)
}

// GuardsRecipients implements commands.RecipientGuarding: RecordAccept checks a record's Guard
// in its own transaction (recipientsUnblocked).
func (s *EventStore) GuardsRecipients() bool { return true }

// RecordAccept records an accept request once per (tenant, request key), with its events and
// outbox messages, in one transaction. It writes the request as new in one round trip and lets
// the database refuse a key that is in flight or recorded; only then does it read the key
// (recordAcceptChecked), at two more.
func (s *EventStore) RecordAccept(ctx context.Context, rec commands.AcceptRecord) ([]byte, bool, error) {
	w, err := s.newAccepts(ctx, []commands.AcceptRecord{rec})
	if err == nil {
		if err = w.send(ctx, s.pool); err == nil {
			return rec.Response, false, nil
		}
		if recipientBlocked(err) {
			return nil, false, commands.ErrRecipientBlocked
		}
		if !keyTaken(err) {
			return nil, false, fmt.Errorf("record accept %s/%s: %w", rec.Tenant, rec.RequestKey, err)
		}
	}
	// A key in flight or recorded, or writes that cannot be built: the checked path answers, and
	// a recorded key's answer comes before the build error, as it did before the fast path.
	return s.recordAcceptChecked(ctx, rec)
}

// recordAcceptChecked records an accept request after reading its key. A transaction-scoped
// advisory lock on the key tells a concurrent repeat (409) from a finished one (stored answer or
// 422) without waiting.
func (s *EventStore) recordAcceptChecked(ctx context.Context, rec commands.AcceptRecord) ([]byte, bool, error) {
	var stored []byte
	var replayed bool
	err := func() error {
		// BEGIN, the lock and the read travel together; the read counts only if the lock was
		// taken. The writes travel with COMMIT.
		var locked bool
		var hash []byte
		var getErr error
		reads := []*pgx.QueuedQuery{
			{SQL: acceptRequestLock, Arguments: []any{acceptLockKey(rec.Tenant, rec.RequestKey)}},
			{SQL: acceptRequestGet, Arguments: []any{rec.Tenant, rec.RequestKey, s.acceptSinces([]string{rec.Tenant})[0]}},
		}
		conn, err := beginWith(ctx, s.pool, reads, func(results pgx.BatchResults) error {
			if err := results.QueryRow().Scan(&locked); err != nil {
				return err
			}
			getErr = results.QueryRow().Scan(&hash, &stored)
			return nil
		})
		if err != nil {
			return err
		}
		switch {
		case !locked:
			rollback(ctx, conn)
			return commands.ErrRequestInFlight
		case getErr == nil:
			rollback(ctx, conn)
			if string(hash) != string(rec.RequestHash) {
				return commands.ErrRequestMismatch
			}
			replayed = true
			return nil
		case !errors.Is(getErr, pgx.ErrNoRows):
			rollback(ctx, conn)
			return getErr
		}
		var payloads payloadRows
		events, err := payloads.apart(rec)
		if err != nil {
			rollback(ctx, conn)
			return err
		}
		var w writeBatch
		queueGuard(ctx, &w, []commands.AcceptRecord{rec})
		if err := errors.Join(appendEvents(ctx, &w, events), publishOutbox(ctx, &w, rec.Outbox)); err != nil {
			rollback(ctx, conn)
			return err
		}
		payloads.write(ctx, &w)
		_, _ = w.Exec(ctx, acceptRequestPut, rec.Tenant, rec.RequestKey, rec.RequestHash, rec.Response)
		stored = rec.Response
		err = commitWith(ctx, conn, &w)
		if recipientBlocked(err) {
			return commands.ErrRecipientBlocked
		}
		return err
	}()
	switch {
	case err == nil:
		return stored, replayed, nil
	case errors.Is(err, commands.ErrRequestInFlight), errors.Is(err, commands.ErrRequestMismatch):
		return nil, false, err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateUniqueViolation {
		// Only a request that bypassed the lock (another process with a different lock key
		// encoding cannot exist) could collide here; report it as in flight, the caller retries.
		return nil, false, fmt.Errorf("%w: %v", commands.ErrRequestInFlight, err)
	}
	return nil, false, fmt.Errorf("record accept %s/%s: %w", rec.Tenant, rec.RequestKey, err)
}

// RequestLookup returns the stored answer of an accept request, for audit by Idempotency-Key.
func (s *EventStore) RequestLookup(ctx context.Context, tenant, requestKey string) ([]byte, error) {
	var hash, response []byte
	err := s.pool.QueryRow(ctx, acceptRequestGet, tenant, requestKey, s.acceptSinces([]string{tenant})[0]).Scan(&hash, &response)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, commands.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("look up request %s: %w", requestKey, err)
	}
	return response, nil
}

// Ping checks that the database answers.
func (s *EventStore) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }
