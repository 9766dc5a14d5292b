package commands

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/deliveryledger/ledger/domain"
)

// ReplayFilters select the deliveries of a replay job, as the DLQ view knows them.
type ReplayFilters struct {
	Channel      string            `json:"channel,omitempty"`
	FailureClass domain.ErrorClass `json:"failure_class,omitempty"`
	Recipient    string            `json:"recipient,omitempty"`
	// Since and Until bound accepted_at (Until exclusive).
	Since *time.Time `json:"since,omitempty"`
	Until *time.Time `json:"until,omitempty"`
}

// Replay job states.
const (
	// ReplayJobRunning: created, and replayed a page at a time by whichever runner holds it.
	ReplayJobRunning = "running"
	// ReplayJobDone: every item was gone through (replayed or skipped). Final.
	ReplayJobDone = "done"
	// ReplayJobCancelled: an operator cancelled it; its runner stopped at its next page, the
	// items not reached stay pending. Final.
	ReplayJobCancelled = "cancelled"
)

// ReplayItem is one delivery a job selected, with the version at which the DLQ view showed it
// dead (or unknown) then: the death the job replays (0 for items selected before it was kept).
type ReplayItem struct {
	DeliveryID string
	Of         int
}

// ErrReplayJobCancelled: the job was cancelled; its runner stops.
var ErrReplayJobCancelled = errors.New("replay job cancelled")

// ReplayJobFinishedError refuses to cancel a job that has finished (State says how).
type ReplayJobFinishedError struct {
	ID    string
	State string
}

func (e *ReplayJobFinishedError) Error() string {
	return fmt.Sprintf("replay job %s is %s: only a running job can be cancelled", e.ID, e.State)
}

// ReplayJob is an operator's replay of every dead delivery (and, if asked, every unknown one)
// that matched its filters when it was created. It runs in the background, in pages, and
// resumes where it stopped after any crash; no delivery is replayed twice by it, nor a death
// another job or an operator replayed first (the item is skipped naming who did).
type ReplayJob struct {
	ID          string
	Tenant      string
	RequestKey  string
	RequestHash []byte
	Reason      string
	// Actor names who asked for the job; it is recorded on each of its replays (the tenant of
	// the key, "tenant:acme", when the request named no one).
	Actor          string
	IncludeUnknown bool
	Filters        ReplayFilters
	State          string
	// Matched is how many deliveries the filters selected at creation; Replayed and Skipped
	// how many of them the job has been through, and Skips why it skipped them, by reason.
	Matched, Replayed, Skipped int
	Skips                      map[string]int
	CreatedAt, UpdatedAt       time.Time
	FinishedAt                 *time.Time
}

// ErrTooManyMatched: a replay job's filters select more deliveries than one job takes.
var ErrTooManyMatched = errors.New("the filters match too many deliveries for one replay job")

// MaxReplayJobDeliveries is the most deliveries one job replays: narrow the filters for more.
const MaxReplayJobDeliveries = 100_000

// ReplayJobStore keeps replay jobs and the deliveries each selected.
type ReplayJobStore interface {
	// CreateReplayJob records job, with every delivery of its tenant the filters select in the
	// DLQ view (dead ones, and unknown ones with IncludeUnknown) as its items, in one
	// transaction, unless the tenant used job.RequestKey before: then it returns that job and
	// created=false (same RequestHash), or ErrRequestMismatch. More than max selected deliveries
	// is ErrTooManyMatched, and nothing is recorded.
	CreateReplayJob(ctx context.Context, job ReplayJob, max int) (stored ReplayJob, created bool, err error)
	// CountReplayJob counts the deliveries CreateReplayJob would select for job now, recording
	// nothing: the number an operator confirms before creating it.
	CountReplayJob(ctx context.Context, job ReplayJob) (int, error)
	// ReplayJob returns a tenant's job, or ErrNotFound.
	ReplayJob(ctx context.Context, tenant, id string) (ReplayJob, error)
	// ReplayJobs returns a tenant's latest jobs, newest first.
	ReplayJobs(ctx context.Context, tenant string, limit int) ([]ReplayJob, error)
	// ClaimReplayJob leases the oldest running job no one holds (or whose lease ran out) for
	// lease, or returns nil when there is none.
	ClaimReplayJob(ctx context.Context, lease time.Duration) (*ReplayJob, error)
	// PendingReplayItems returns up to limit deliveries of the job not yet gone through, or
	// ErrReplayJobCancelled once the job is cancelled.
	PendingReplayItems(ctx context.Context, jobID string, limit int) ([]ReplayItem, error)
	// FinishReplayItems records the outcome of each delivery ("" replayed, otherwise why it was
	// skipped), adds them to the job's counts and renews its lease, in one transaction; a
	// delivery already finished is not counted again.
	FinishReplayItems(ctx context.Context, jobID string, outcomes map[string]string, lease time.Duration) error
	// CompleteReplayJob marks the job done, unless it was cancelled meanwhile.
	CompleteReplayJob(ctx context.Context, jobID string) error
	// CancelReplayJob cancels a tenant's running job and returns it; a job cancelled before is
	// returned as it is, a finished one with *ReplayJobFinishedError, an unknown one (or another
	// tenant's) is ErrNotFound.
	CancelReplayJob(ctx context.Context, tenant, id string) (ReplayJob, error)
}

// ReplayJobs creates replay jobs and runs them.
type ReplayJobs struct {
	store  ReplayJobStore
	replay *ReplayHandler
	clock  Clock
	logger *slog.Logger
	// Page is how many deliveries a runner replays between two records of its progress.
	Page int
	// Lease is how long a runner holds a job without recording progress before another may
	// take it over.
	Lease time.Duration
	// Pause is the wait between two pages: a large replay spread over time rather than handed to
	// the workers and the providers at once (0: none). It must be shorter than Lease, which
	// each page's record renews.
	Pause time.Duration
}

// Defaults of a replay job runner.
const (
	// DefaultReplayJobPage bounds the replays a crash can make a runner go through again
	// (each answered from its key, not replayed twice) and the writes of progress per job.
	DefaultReplayJobPage = 100
	// DefaultReplayJobLease is how long a job whose runner died waits before another runner
	// (or the same process restarted) resumes it: longer than any page takes, so a slow but
	// live runner keeps its job.
	DefaultReplayJobLease = 30 * time.Second
)

// NewReplayJobs builds the use case over the replay command (keyed replays need its Requests).
func NewReplayJobs(store ReplayJobStore, replay *ReplayHandler, clock Clock, logger *slog.Logger) *ReplayJobs {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &ReplayJobs{store: store, replay: replay, clock: clock, logger: logger, Page: DefaultReplayJobPage,
		Lease: DefaultReplayJobLease}
}

// Create records a job for job's tenant, filters, reason and request key, and returns it
// (created=false: the job an earlier request with the same key made).
func (j *ReplayJobs) Create(ctx context.Context, job ReplayJob) (ReplayJob, bool, error) {
	now := j.clock.Now()
	job.State, job.CreatedAt, job.UpdatedAt = ReplayJobRunning, now, now
	job.Replayed, job.Skipped, job.Skips, job.FinishedAt = 0, 0, map[string]int{}, nil
	return j.store.CreateReplayJob(ctx, job, MaxReplayJobDeliveries)
}

// Count returns how many deliveries a job of job's tenant, filters and include_unknown would
// replay if it were created now (a job created later may select more or fewer).
func (j *ReplayJobs) Count(ctx context.Context, job ReplayJob) (int, error) {
	return j.store.CountReplayJob(ctx, job)
}

// Run claims running jobs and works through them until ctx ends, looking for one every
// interval when there is none.
func (j *ReplayJobs) Run(ctx context.Context, interval time.Duration) error {
	for {
		worked, err := j.RunOnce(ctx)
		if err != nil && ctx.Err() == nil {
			j.logger.Warn("replay job", "err", err)
		}
		if worked && err == nil {
			continue
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

// RunOnce claims one job and runs it to its end (or until ctx ends, or a write fails: another
// runner takes it over when its lease runs out). It reports whether it found a job.
func (j *ReplayJobs) RunOnce(ctx context.Context) (bool, error) {
	job, err := j.store.ClaimReplayJob(ctx, j.Lease)
	if err != nil || job == nil {
		return false, err
	}
	log := j.logger.With("job", job.ID, "tenant", job.Tenant)
	for ctx.Err() == nil {
		items, err := j.store.PendingReplayItems(ctx, job.ID, j.Page)
		if errors.Is(err, ErrReplayJobCancelled) {
			log.Info("replay job cancelled: stopped")
			return true, nil
		}
		if err != nil {
			return true, err
		}
		if len(items) == 0 {
			if err := j.store.CompleteReplayJob(ctx, job.ID); err != nil {
				return true, err
			}
			log.Info("replay job done", "matched", job.Matched)
			return true, nil
		}
		outcomes := make(map[string]string, len(items))
		for _, item := range items {
			outcome, err := j.one(ctx, job, item)
			if err != nil {
				// Record what is done; the rest is retried by whoever holds the job next.
				if len(outcomes) > 0 {
					_ = j.store.FinishReplayItems(ctx, job.ID, outcomes, j.Lease)
				}
				return true, err
			}
			outcomes[item.DeliveryID] = outcome
		}
		if err := j.store.FinishReplayItems(ctx, job.ID, outcomes, j.Lease); err != nil {
			return true, err
		}
		if j.Pause > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(j.Pause):
			}
		}
	}
	return true, ctx.Err()
}

// one replays one delivery of the job, keyed by the job and the delivery, so that a runner that
// replays it again after a crash gets the first replay back instead of a second one, and asked
// of the death the job selected, so that a death another job (or an operator) replayed first is
// not replayed again. It returns "" when the delivery was replayed, or why it was skipped.
func (j *ReplayJobs) one(ctx context.Context, job *ReplayJob, item ReplayItem) (string, error) {
	d, err := j.replay.Handle(ctx, Replay{Tenant: job.Tenant, DeliveryID: item.DeliveryID, Reason: ReplayJobReason(job.Reason, job.ID),
		Actor: replayJobActor(job), AllowUnknown: job.IncludeUnknown, Of: item.Of, Job: job.ID,
		RequestKey: "job:" + job.ID + ":" + item.DeliveryID, RequestHash: job.RequestHash})
	var already *domain.AlreadyReplayedError
	var suppressed *ReplaySuppressedError
	switch {
	case err == nil:
		return "", nil
	case errors.As(err, &already):
		return "already replayed by " + already.By(), nil
	case errors.As(err, &suppressed):
		return "recipient suppressed", nil
	case errors.Is(err, domain.ErrNotDead) && d != nil:
		if job.IncludeUnknown {
			return fmt.Sprintf("no longer dead or unknown: %s", d.State()), nil
		}
		return fmt.Sprintf("no longer dead: %s", d.State()), nil
	case errors.Is(err, ErrNotFound):
		return "not found", nil
	}
	return "", err
}

// ReplayJobReason is the reason a job's replays record: the operator's, and the job that made
// the replay, so that a delivery's history leads to the job.
func ReplayJobReason(reason, jobID string) string {
	return reason + " (replay job " + jobID + ")"
}

// replayJobActor is who a job's replays are recorded as made by: whom the request named, or the
// tenant whose key created it (jobs created before they kept an actor name no one).
func replayJobActor(job *ReplayJob) string {
	if job.Actor != "" {
		return job.Actor
	}
	return "tenant:" + job.Tenant
}

// Get returns a tenant's job, or ErrNotFound.
func (j *ReplayJobs) Get(ctx context.Context, tenant, id string) (ReplayJob, error) {
	return j.store.ReplayJob(ctx, tenant, id)
}

// Cancel cancels a tenant's running job: its runner stops at its next page (the page in hand is
// finished and counted). Cancelling a cancelled job answers it again; a finished one is
// *ReplayJobFinishedError.
func (j *ReplayJobs) Cancel(ctx context.Context, tenant, id string) (ReplayJob, error) {
	return j.store.CancelReplayJob(ctx, tenant, id)
}

// List returns a tenant's latest jobs, newest first.
func (j *ReplayJobs) List(ctx context.Context, tenant string, limit int) ([]ReplayJob, error) {
	return j.store.ReplayJobs(ctx, tenant, limit)
}
