// Package metrics defines the ledger's Prometheus metrics, in one place, with their names and
// labels in Prometheus conventions. Components receive a *Metrics and record into it; a nil
// *Metrics records nothing, so tests can leave it out.
package metrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics holds every collector.
type Metrics struct {
	registry *prometheus.Registry

	accepts          *prometheus.CounterVec
	suppressed       *prometheus.CounterVec
	attempts         *prometheus.CounterVec
	retries          *prometheus.CounterVec
	deadLetters      *prometheus.CounterVec
	deferrals        *prometheus.CounterVec
	attemptLatency   *prometheus.HistogramVec
	deliveredLatency *prometheus.HistogramVec
	inFlight         *prometheus.GaugeVec
	relayLag         prometheus.Histogram
	acceptPaced      prometheus.Histogram
	relayPublished   prometheus.Counter
	queueDepth       *prometheus.GaugeVec
	oldestWaiting    *prometheus.GaugeVec

	projectionApplied    *prometheus.CounterVec
	projectionLagEvents  *prometheus.GaugeVec
	projectionLagSeconds *prometheus.GaugeVec
	viewDeliveries       *prometheus.GaugeVec
	decisions            *prometheus.CounterVec
	circuitState         *prometheus.GaugeVec
	receipts             *prometheus.CounterVec

	archivedEvents    prometheus.Counter
	archiveFailures   prometheus.Counter
	heldPartitions    prometheus.Gauge
	overduePartitions prometheus.Gauge
}

// latencyBuckets span a fast local call to a slow provider.
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// deliveryBuckets span accept → delivered, which includes retries.
var deliveryBuckets = []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// New registers every collector (and the Go and process collectors) on a fresh registry.
func New() *Metrics {
	m := &Metrics{
		registry: prometheus.NewRegistry(),
		accepts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_accepted_deliveries_total",
			Help: "Deliveries accepted (committed with their outbox message), by channel and priority.",
		}, []string{"channel", "priority"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_deliveries_suppressed_total",
			Help: "Deliveries recorded suppressed instead of sent, by channel and by what stopped them (suppression: the tenant's suppression list; preference: an opt-out of the category).",
		}, []string{"channel", "by"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_attempts_total",
			Help: "Delivery attempts by channel, provider and outcome (delivered, transient, permanent, unknown).",
		}, []string{"channel", "provider", "outcome"}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_retries_scheduled_total",
			Help: "Retries scheduled after a transient failure, by channel.",
		}, []string{"channel"}),
		deadLetters: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_dead_letters_total",
			Help: "Deliveries that went dead, by channel and failure class.",
		}, []string{"channel", "class"}),
		deferrals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_deferrals_total",
			Help: "Attempts held back by a rate limit or concurrency cap (no attempt consumed), by channel.",
		}, []string{"channel"}),
		attemptLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ledger_attempt_duration_seconds",
			Help:    "Duration of one provider call, by channel and provider.",
			Buckets: latencyBuckets,
		}, []string{"channel", "provider"}),
		deliveredLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ledger_accept_to_delivered_seconds",
			Help:    "Time from acceptance to the recorded delivery, by channel.",
			Buckets: deliveryBuckets,
		}, []string{"channel"}),
		inFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_provider_in_flight",
			Help: "Provider calls in flight, by provider.",
		}, []string{"provider"}),
		relayLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ledger_relay_lag_seconds",
			Help:    "Time from the outbox commit to the broker's confirm.",
			Buckets: latencyBuckets,
		}),
		acceptPaced: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ledger_accept_paced_seconds",
			Help:    "How long an accept waited before its commit because more work waited for the workers than LEDGER_ACCEPT_PACE_BACKLOG (paced accepts only).",
			Buckets: latencyBuckets,
		}),
		relayPublished: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledger_relay_published_total",
			Help: "Outbox messages the relay published and the broker confirmed.",
		}),
		queueDepth: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_queue_messages",
			Help: "Messages ready in a broker queue (work, delay tier or dead), by queue.",
		}, []string{"queue"}),
		oldestWaiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_oldest_waiting_delivery_age_seconds",
			Help: "Age of the oldest delivery accepted or queued and not yet started, by channel.",
		}, []string{"channel"}),
		projectionApplied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_projection_applied_events_total",
			Help: "Events the projector applied to a view, by projection.",
		}, []string{"projection"}),
		projectionLagEvents: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_projection_lag_events",
			Help: "Committed events a view has not applied yet, by projection.",
		}, []string{"projection"}),
		projectionLagSeconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_projection_lag_seconds",
			Help: "Age of the oldest event a view has not applied yet (0 when caught up), by projection.",
		}, []string{"projection"}),
		viewDeliveries: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_view_deliveries",
			Help: "Deliveries in each state over all tenants, from the counters view, by channel and state.",
		}, []string{"channel", "state"}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_operator_decisions_total",
			Help: "Operator decisions recorded through the API, by channel and decision (replayed, reconciled_delivered, reconciled_dead, reconciled_retrying).",
		}, []string{"channel", "decision"}),
		circuitState: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "ledger_provider_circuit_state",
			Help: "State of each provider's circuit breaker in this process: 0 closed, 1 half open, 2 open.",
		}, []string{"provider"}),
		receipts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ledger_receipts_total",
			Help: "Providers' receipts and lookups recorded, by provider, source (receipt, lookup) and the ledger's reading (pending, delivered, failed, retry, not_found).",
		}, []string{"provider", "source", "status"}),
		archivedEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledger_retention_archived_events_total",
			Help: "Events that left the hot store for the archive (written, read back, checked, then dropped).",
		}),
		archiveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ledger_retention_archive_failures_total",
			Help: "Partitions whose archive could not be written or did not check against their rows: nothing was dropped.",
		}),
		heldPartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ledger_retention_held_partitions",
			Help: "Partitions of the history past their keep that stay hot, at the last retention round: a delivery in them is not terminal (retrying, unknown, awaiting a receipt), or a tenant keeps longer.",
		}),
		overduePartitions: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ledger_retention_overdue_partitions",
			Help: "Partitions held back by a delivery that is not terminal past twice their keep, at the last retention round.",
		}),
	}
	m.registry.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.accepts, m.attempts, m.retries, m.deadLetters, m.deferrals, m.attemptLatency,
		m.deliveredLatency, m.inFlight, m.relayLag, m.acceptPaced, m.relayPublished, m.queueDepth, m.oldestWaiting,
		m.projectionApplied, m.projectionLagEvents, m.projectionLagSeconds, m.viewDeliveries,
		m.decisions, m.circuitState, m.receipts, m.suppressed,
		m.archivedEvents, m.archiveFailures, m.heldPartitions, m.overduePartitions,
	)
	return m
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{Registry: m.registry})
}

// Decided counts an operator's decision about a delivery.
func (m *Metrics) Decided(channel, decision string) {
	if m != nil {
		m.decisions.WithLabelValues(channel, decision).Inc()
	}
}

// Accepted counts accepted deliveries.
func (m *Metrics) Accepted(channel, priority string, n int) {
	if m != nil {
		m.accepts.WithLabelValues(channel, priority).Add(float64(n))
	}
}

// Suppressed counts a delivery recorded suppressed (at its accept, or at an attempt's start).
func (m *Metrics) Suppressed(channel, by string) {
	if m != nil {
		m.suppressed.WithLabelValues(channel, by).Inc()
	}
}

// Attempt records one provider call.
func (m *Metrics) Attempt(channel, provider, outcome string, d time.Duration) {
	if m != nil {
		m.attempts.WithLabelValues(channel, provider, outcome).Inc()
		m.attemptLatency.WithLabelValues(channel, provider).Observe(d.Seconds())
	}
}

// Retry counts a scheduled retry.
func (m *Metrics) Retry(channel string) {
	if m != nil {
		m.retries.WithLabelValues(channel).Inc()
	}
}

// Dead counts a delivery that went dead.
func (m *Metrics) Dead(channel, class string) {
	if m != nil {
		m.deadLetters.WithLabelValues(channel, class).Inc()
	}
}

// Deferred counts an attempt held back by a limit.
func (m *Metrics) Deferred(channel string) {
	if m != nil {
		m.deferrals.WithLabelValues(channel).Inc()
	}
}

// Delivered records accept → delivered latency.
func (m *Metrics) Delivered(channel string, sinceAccept time.Duration) {
	if m != nil {
		m.deliveredLatency.WithLabelValues(channel).Observe(sinceAccept.Seconds())
	}
}

// InFlight moves the in-flight gauge of a provider by delta.
func (m *Metrics) InFlight(provider string, delta int) {
	if m != nil {
		m.inFlight.WithLabelValues(provider).Add(float64(delta))
	}
}

// Relayed records one confirmed relay publish and its lag from the outbox commit.
// AcceptPaced records the wait of an accept held back by the accept pacing.
func (m *Metrics) AcceptPaced(wait time.Duration) {
	if m != nil {
		m.acceptPaced.Observe(wait.Seconds())
	}
}

func (m *Metrics) Relayed(lag time.Duration) {
	if m != nil {
		m.relayPublished.Inc()
		if lag >= 0 {
			m.relayLag.Observe(lag.Seconds())
		}
	}
}

// QueueDepth sets a queue's ready message count.
func (m *Metrics) QueueDepth(queue string, n int) {
	if m != nil {
		m.queueDepth.WithLabelValues(queue).Set(float64(n))
	}
}

// OldestWaiting sets the age of the oldest waiting delivery of a channel.
func (m *Metrics) OldestWaiting(channel string, age time.Duration) {
	if m != nil {
		m.oldestWaiting.WithLabelValues(channel).Set(age.Seconds())
	}
}

// ProjectionApplied counts events the projector applied to a view.
func (m *Metrics) ProjectionApplied(projection string, events int) {
	if m != nil {
		m.projectionApplied.WithLabelValues(projection).Add(float64(events))
	}
}

// ProjectionLag sets how far a view is behind the log: committed events not applied yet, and the
// age of the oldest of them.
func (m *Metrics) ProjectionLag(projection string, events int64, behind time.Duration) {
	if m != nil {
		m.projectionLagEvents.WithLabelValues(projection).Set(float64(events))
		m.projectionLagSeconds.WithLabelValues(projection).Set(behind.Seconds())
	}
}

// ViewDeliveries sets the number of deliveries in a state over all tenants (tenants are not a
// label: their number is unbounded).
func (m *Metrics) ViewDeliveries(channel, state string, n int64) {
	if m != nil {
		m.viewDeliveries.WithLabelValues(channel, state).Set(float64(n))
	}
}

// CircuitState sets a provider's breaker state: 0 closed, 1 half open, 2 open.
func (m *Metrics) CircuitState(provider string, state int) {
	if m != nil {
		m.circuitState.WithLabelValues(provider).Set(float64(state))
	}
}

// Receipt counts a provider's receipt or lookup answer.
func (m *Metrics) Receipt(provider, source, status string) {
	if m != nil {
		m.receipts.WithLabelValues(provider, source, status).Inc()
	}
}

// Archived counts events that left for the archive (the retention pass's Observer).
func (m *Metrics) Archived(events int64) {
	if m != nil {
		m.archivedEvents.Add(float64(events))
	}
}

// Held sets the partitions held past their keep, and those held past twice it.
func (m *Metrics) Held(held, overdue int) {
	if m != nil {
		m.heldPartitions.Set(float64(held))
		m.overduePartitions.Set(float64(overdue))
	}
}

// Failed counts a partition whose archive failed its check.
func (m *Metrics) Failed() {
	if m != nil {
		m.archiveFailures.Inc()
	}
}
