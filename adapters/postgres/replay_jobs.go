package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/deliveryledger/ledger/commands"
)

const replayJobColumns = `id::text, tenant, request_key, request_hash, reason, actor, include_unknown, filters, state,
matched, replayed, skipped, skips, created_at, updated_at, finished_at`

const (
	replayJobInsert = `INSERT INTO replay_jobs (id, tenant, request_key, request_hash, reason, actor, include_unknown,
	filters, state, matched, created_at, updated_at)
VALUES ($1, $2, $3, $4, $5, $9, $6, $7, 'running', 0, $8, $8)
ON CONFLICT (tenant, request_key) DO NOTHING`

	// replayItemsWhere selects, from the DLQ view v, the tenant's deliveries a job's filters
	// select: $2 tenant, $3 include_unknown, $4 channel, $5 failure_class, $6 recipient, $7 and
	// $8 since and until. A job's items and its preview's count are the same selection.
	replayItemsWhere = `v.tenant = $2 AND (v.state = 'dead' OR ($3 AND v.state = 'unknown'))
	AND ($4 = '' OR v.channel = $4) AND ($5 = '' OR v.failure_class = $5) AND ($6 = '' OR v.recipient = $6)
	AND ($7::timestamptz IS NULL OR v.accepted_at >= $7) AND ($8::timestamptz IS NULL OR v.accepted_at < $8)`

	// The items are the tenant's deliveries in the DLQ view that the filters select, each with
	// the version the view shows it dead at: the death the job replays.
	replayItemsSelect = `INSERT INTO replay_job_items (job_id, delivery_id, dead_version)
SELECT $1, v.id, v.version FROM dlq_view v WHERE ` + replayItemsWhere

	// replayItemsCount counts them; $1 is unused, so both take the same arguments.
	replayItemsCount = `SELECT count(*) FROM dlq_view v WHERE $1::text IS NOT NULL AND ` + replayItemsWhere

	replayJobMatched = `UPDATE replay_jobs SET matched = $2 WHERE id = $1`

	replayJobGet = `SELECT ` + replayJobColumns + ` FROM replay_jobs WHERE tenant = $1 AND id = $2`

	replayJobByKey = `SELECT ` + replayJobColumns + ` FROM replay_jobs WHERE tenant = $1 AND request_key = $2`

	replayJobList = `SELECT ` + replayJobColumns + ` FROM replay_jobs WHERE tenant = $1 ORDER BY created_at DESC, id DESC LIMIT $2`

	replayJobClaim = `UPDATE replay_jobs SET lease_until = now() + $1::interval
WHERE id = (SELECT id FROM replay_jobs WHERE state = 'running' AND (lease_until IS NULL OR lease_until < now())
	ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
RETURNING ` + replayJobColumns

	replayJobState = `SELECT state FROM replay_jobs WHERE id = $1`

	replayItemsPending = `SELECT delivery_id::text, coalesce(dead_version, 0) FROM replay_job_items WHERE job_id = $1 AND NOT done
ORDER BY delivery_id LIMIT $2`

	// The items not finished before are finished now; only they count.
	replayItemsFinish = `WITH finished AS (
	UPDATE replay_job_items i SET done = true, outcome = u.outcome
	FROM unnest($2::uuid[], $3::text[]) AS u(id, outcome)
	WHERE i.job_id = $1 AND i.delivery_id = u.id AND NOT i.done
	RETURNING i.outcome
), skips AS (
	SELECT coalesce(jsonb_object_agg(outcome, n), '{}') AS counts FROM (
		SELECT outcome, count(*) AS n FROM finished WHERE outcome <> '' GROUP BY outcome) s
)
UPDATE replay_jobs j SET
	replayed = j.replayed + (SELECT count(*) FROM finished WHERE outcome = ''),
	skipped = j.skipped + (SELECT count(*) FROM finished WHERE outcome <> ''),
	skips = (SELECT coalesce(jsonb_object_agg(k, coalesce((j.skips->>k)::int, 0) + coalesce((s.counts->>k)::int, 0)), '{}')
		FROM skips s, jsonb_object_keys(j.skips || s.counts) AS k),
	updated_at = now(), lease_until = now() + $4::interval
WHERE j.id = $1`

	replayJobComplete = `UPDATE replay_jobs SET state = 'done', finished_at = now(), updated_at = now(), lease_until = NULL
WHERE id = $1 AND state = 'running'`

	// A running job is cancelled; one that is not running is left as it is (the caller reads it).
	replayJobCancel = `UPDATE replay_jobs SET state = 'cancelled', finished_at = now(), updated_at = now(), lease_until = NULL
WHERE tenant = $1 AND id = $2 AND state = 'running'
RETURNING ` + replayJobColumns
)

func scanReplayJob(row pgx.CollectableRow) (commands.ReplayJob, error) {
	var j commands.ReplayJob
	var filters, skips []byte
	err := row.Scan(&j.ID, &j.Tenant, &j.RequestKey, &j.RequestHash, &j.Reason, &j.Actor, &j.IncludeUnknown, &filters, &j.State,
		&j.Matched, &j.Replayed, &j.Skipped, &skips, &j.CreatedAt, &j.UpdatedAt, &j.FinishedAt)
	if err != nil {
		return j, err
	}
	if err := json.Unmarshal(filters, &j.Filters); err != nil {
		return j, fmt.Errorf("replay job %s filters: %w", j.ID, err)
	}
	if err := json.Unmarshal(skips, &j.Skips); err != nil {
		return j, fmt.Errorf("replay job %s skips: %w", j.ID, err)
	}
	j.CreatedAt, j.UpdatedAt = j.CreatedAt.UTC(), j.UpdatedAt.UTC()
	if j.FinishedAt != nil {
		t := j.FinishedAt.UTC()
		j.FinishedAt = &t
	}
	return j, nil
}

// CreateReplayJob implements commands.ReplayJobStore.
func (s *EventStore) CreateReplayJob(ctx context.Context, job commands.ReplayJob, max int) (commands.ReplayJob, bool, error) {
	filters, err := json.Marshal(job.Filters)
	if err != nil {
		return job, false, err
	}
	if job.ID == "" {
		job.ID = uuid.Must(uuid.NewV7()).String()
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return job, false, fmt.Errorf("create replay job: %w", err)
	}
	defer tx.Rollback(ctx)
	tag, err := tx.Exec(ctx, replayJobInsert, job.ID, job.Tenant, job.RequestKey, job.RequestHash, job.Reason,
		job.IncludeUnknown, filters, job.CreatedAt, job.Actor)
	if err != nil {
		return job, false, fmt.Errorf("create replay job: %w", err)
	}
	if tag.RowsAffected() == 0 {
		// The key was used before: that request's job, if it was the same request.
		rows, err := tx.Query(ctx, replayJobByKey, job.Tenant, job.RequestKey)
		if err != nil {
			return job, false, fmt.Errorf("read replay job: %w", err)
		}
		earlier, err := pgx.CollectExactlyOneRow(rows, scanReplayJob)
		if err != nil {
			return job, false, fmt.Errorf("read replay job: %w", err)
		}
		if string(earlier.RequestHash) != string(job.RequestHash) {
			return earlier, false, commands.ErrRequestMismatch
		}
		return earlier, false, nil
	}
	tag, err = tx.Exec(ctx, replayItemsSelect, replayItemsArgs(job)...)
	if err != nil {
		return job, false, fmt.Errorf("select replay job deliveries: %w", err)
	}
	if n := int(tag.RowsAffected()); n > max {
		return job, false, fmt.Errorf("%w: %d match, at most %d", commands.ErrTooManyMatched, n, max)
	} else {
		job.Matched = n
	}
	if _, err := tx.Exec(ctx, replayJobMatched, job.ID, job.Matched); err != nil {
		return job, false, fmt.Errorf("create replay job: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return job, false, fmt.Errorf("create replay job: %w", err)
	}
	return job, true, nil
}

// replayItemsArgs are the arguments of replayItemsSelect and replayItemsCount for job.
func replayItemsArgs(job commands.ReplayJob) []any {
	f := job.Filters
	return []any{job.ID, job.Tenant, job.IncludeUnknown, f.Channel, string(f.FailureClass), f.Recipient, f.Since, f.Until}
}

// CountReplayJob implements commands.ReplayJobStore.
func (s *EventStore) CountReplayJob(ctx context.Context, job commands.ReplayJob) (int, error) {
	var n int
	if err := s.pool.QueryRow(ctx, replayItemsCount, replayItemsArgs(job)...).Scan(&n); err != nil {
		return 0, fmt.Errorf("count replay job deliveries: %w", err)
	}
	return n, nil
}

// ReplayJob implements commands.ReplayJobStore.
func (s *EventStore) ReplayJob(ctx context.Context, tenant, id string) (commands.ReplayJob, error) {
	if _, err := uuid.Parse(id); err != nil {
		return commands.ReplayJob{}, commands.ErrNotFound
	}
	rows, err := s.pool.Query(ctx, replayJobGet, tenant, id)
	if err != nil {
		return commands.ReplayJob{}, fmt.Errorf("read replay job: %w", err)
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanReplayJob)
	if errors.Is(err, pgx.ErrNoRows) {
		return j, commands.ErrNotFound
	}
	return j, err
}

// ReplayJobs implements commands.ReplayJobStore.
func (s *EventStore) ReplayJobs(ctx context.Context, tenant string, limit int) ([]commands.ReplayJob, error) {
	rows, err := s.pool.Query(ctx, replayJobList, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("list replay jobs: %w", err)
	}
	return pgx.CollectRows(rows, scanReplayJob)
}

// ClaimReplayJob implements commands.ReplayJobStore.
func (s *EventStore) ClaimReplayJob(ctx context.Context, lease time.Duration) (*commands.ReplayJob, error) {
	rows, err := s.pool.Query(ctx, replayJobClaim, lease.String())
	if err != nil {
		return nil, fmt.Errorf("claim replay job: %w", err)
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanReplayJob)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim replay job: %w", err)
	}
	return &j, nil
}

// PendingReplayItems implements commands.ReplayJobStore.
func (s *EventStore) PendingReplayItems(ctx context.Context, jobID string, limit int) ([]commands.ReplayItem, error) {
	var state string
	if err := s.pool.QueryRow(ctx, replayJobState, jobID).Scan(&state); err != nil {
		return nil, fmt.Errorf("read replay job %s: %w", jobID, err)
	}
	if state == commands.ReplayJobCancelled {
		return nil, commands.ErrReplayJobCancelled
	}
	rows, err := s.pool.Query(ctx, replayItemsPending, jobID, limit)
	if err != nil {
		return nil, fmt.Errorf("read replay job items: %w", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (commands.ReplayItem, error) {
		var item commands.ReplayItem
		err := row.Scan(&item.DeliveryID, &item.Of)
		return item, err
	})
}

// FinishReplayItems implements commands.ReplayJobStore.
func (s *EventStore) FinishReplayItems(ctx context.Context, jobID string, outcomes map[string]string, lease time.Duration) error {
	ids := make([]string, 0, len(outcomes))
	texts := make([]string, 0, len(outcomes))
	for id, o := range outcomes {
		ids, texts = append(ids, id), append(texts, o)
	}
	if _, err := s.pool.Exec(ctx, replayItemsFinish, jobID, ids, texts, lease.String()); err != nil {
		return fmt.Errorf("record replay job progress: %w", err)
	}
	return nil
}

// CompleteReplayJob implements commands.ReplayJobStore.
func (s *EventStore) CompleteReplayJob(ctx context.Context, jobID string) error {
	if _, err := s.pool.Exec(ctx, replayJobComplete, jobID); err != nil {
		return fmt.Errorf("complete replay job: %w", err)
	}
	return nil
}

// CancelReplayJob implements commands.ReplayJobStore.
func (s *EventStore) CancelReplayJob(ctx context.Context, tenant, id string) (commands.ReplayJob, error) {
	if _, err := uuid.Parse(id); err != nil {
		return commands.ReplayJob{}, commands.ErrNotFound
	}
	rows, err := s.pool.Query(ctx, replayJobCancel, tenant, id)
	if err != nil {
		return commands.ReplayJob{}, fmt.Errorf("cancel replay job: %w", err)
	}
	j, err := pgx.CollectExactlyOneRow(rows, scanReplayJob)
	if err == nil {
		return j, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return j, fmt.Errorf("cancel replay job: %w", err)
	}
	// Not running (or not the tenant's): as it is.
	j, err = s.ReplayJob(ctx, tenant, id)
	switch {
	case err != nil:
		return j, err
	case j.State == commands.ReplayJobCancelled:
		return j, nil
	}
	return j, &commands.ReplayJobFinishedError{ID: j.ID, State: j.State}
}

var _ commands.ReplayJobStore = (*EventStore)(nil)
