package app

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"github.com/deliveryledger/ledger/adapters/httpapi"
	"github.com/deliveryledger/ledger/adapters/mechanisms/breaker"
	"github.com/deliveryledger/ledger/adapters/mechanisms/limit"
	"github.com/deliveryledger/ledger/adapters/postgres"
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// healthInterval is how often a worker process reports its breakers for GET /v1/providers, and
// healthFresh how old a report may be and still count.
const (
	healthInterval = 2 * time.Second
	healthFresh    = time.Minute
)

// buildBreakers gives every provider a circuit breaker, its state in the metric.
func (a *App) buildBreakers() error {
	list := make([]breaker.Provider, 0, len(a.providers))
	for _, p := range a.providers {
		list = append(list, breaker.Provider{Name: p.name, Channel: p.channel, Settings: p.breaker})
		a.metrics.CircuitState(p.name, breaker.Closed.Gauge())
	}
	logger := a.logger.With("role", "worker")
	var err error
	a.breakers, err = breaker.New(list, func(provider string, to breaker.State) {
		a.metrics.CircuitState(provider, to.Gauge())
		logger.Warn("provider circuit changed", "provider", provider, "state", to)
	})
	return err
}

// instance names this process in the providers' health reports.
var instance = func() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s:%d", host, os.Getpid())
}()

// reportHealth writes this process's breakers to the database every healthInterval.
func (a *App) reportHealth(ctx context.Context) error {
	return everyFromNow(ctx, healthInterval, func() {
		now := time.Now()
		var hs []postgres.ProviderHealth
		for _, h := range a.breakers.Snapshot() {
			hs = append(hs, postgres.ProviderHealth{Provider: h.Provider, Instance: instance, Channel: h.Channel,
				State: string(h.State), Requests: h.Requests, Failures: h.Failures, UpdatedAt: now})
		}
		if err := a.store.PutHealth(ctx, hs); err != nil && ctx.Err() == nil {
			a.logger.Warn("report provider health", "err", err)
		}
	})
}

// providerViews answers GET /v1/providers: every configured provider, with the worst state the
// worker processes report of it.
func (a *App) providerViews(ctx context.Context) ([]httpapi.ProviderView, error) {
	reports, err := a.store.Health(ctx, time.Now().Add(-healthFresh))
	if err != nil {
		return nil, err
	}
	rank := map[string]int{string(breaker.Closed): 0, string(breaker.HalfOpen): 1, string(breaker.Open): 2}
	var out []httpapi.ProviderView
	for _, p := range a.providers {
		v := httpapi.ProviderView{Name: p.name, Channel: p.channel, Type: p.typ, State: "unknown"}
		// The counts stay here: every tenant's sends are in them, and the view is shown to every
		// tenant. Their ratio says how the provider is doing without saying how much anyone sends.
		var requests, failures int64
		for _, r := range reports {
			if r.Provider != p.name {
				continue
			}
			if v.Instances == 0 || rank[r.State] > rank[v.State] {
				v.State = r.State
			}
			v.Instances++
			requests += r.Requests
			failures += r.Failures
			if at := r.UpdatedAt; v.ReportedAt == nil || at.After(*v.ReportedAt) {
				v.ReportedAt = &at
			}
		}
		if requests > 0 {
			v.ErrorRate = math.Round(float64(failures)/float64(requests)*1000) / 1000
		}
		out = append(out, v)
	}
	return out, nil
}

// receiptHandler is the command that records receipts and lookups, made once.
func (a *App) receiptHandler(clock commands.Clock, policies commands.Policies) *commands.RecordReceiptHandler {
	if a.receipts == nil {
		a.receipts = commands.NewRecordReceiptHandler(a.store, a.store, a.topology, clock, policies)
		a.receipts.OnDecided = func(channel string, state domain.State) {
			a.metrics.Decided(channel, "receipt_"+string(state))
		}
	}
	return a.receipts
}

// receiptIntake is what POST /v1/receipts/{provider} needs: the providers that send receipts.
func (a *App) receiptIntake(clock commands.Clock, policies commands.Policies) *httpapi.Receipts {
	parsers := map[string]httpapi.ReceiptParser{}
	byGET := map[string]bool{}
	for _, p := range a.providers {
		if p.receipts != nil {
			parsers[p.name] = p.receipts
			// A provider whose account may send receipts as a GET query says so (Vonage's);
			// Twilio always POSTs a form.
			if g, ok := p.receipts.(httpapi.GETReceipts); ok {
				byGET[p.name] = g.ReceiptsByGET()
			}
		}
	}
	if len(parsers) == 0 {
		return nil
	}
	return &httpapi.Receipts{Parsers: parsers, Record: a.receiptHandler(clock, policies), PublicURL: a.publicURL, ByGET: byGET,
		Observe: func(provider, status string) { a.metrics.Receipt(provider, "receipt", status) }}
}

// buildReconciler wires the reconciler role: the providers that can be asked, each under its own
// lookup rate.
func (a *App) buildReconciler(clock commands.Clock, policies commands.Policies) error {
	lookups := map[string]commands.LookupProvider{}
	rules := map[string]limit.Rule{}
	for _, p := range a.providers {
		if p.lookup == nil {
			continue
		}
		lookups[p.name] = commands.LookupProvider{Lookup: countedLookup{p.lookup, p.name, a}, Recheck: p.recheck}
		rules[p.name] = limit.Rule{Rate: p.lookupRate, Burst: int(math.Ceil(p.lookupRate))}
	}
	limiter, err := limit.New(limit.Config{Providers: rules}, time.Now)
	if err != nil {
		return err
	}
	a.reconciler, err = commands.NewReconciler(commands.ReconcilerConfig{
		Store: a.store, Waits: dueChecks{a.views}, Receipts: a.receiptHandler(clock, policies), Clock: clock,
		Policies: policies, Lookups: lookups, Limiter: limiter, UnknownAfter: a.cfg.ReconcileUnknownAfter,
		Logger:    a.logger.With("role", "reconciler"),
		OnDecided: a.metrics.Decided,
	})
	return err
}

// countedLookup counts a provider's lookup answers in the metrics.
type countedLookup struct {
	inner    commands.Lookup
	provider string
	a        *App
}

func (c countedLookup) Lookup(ctx context.Context, q commands.LookupQuery) (commands.Receipt, error) {
	r, err := c.inner.Lookup(ctx, q)
	if err == nil {
		c.a.metrics.Receipt(c.provider, "lookup", string(r.Status))
	}
	return r, err
}

// dueChecks gives the reconciler the status view's deliveries due a look.
type dueChecks struct{ views *postgres.Views }

func (d dueChecks) DueChecks(ctx context.Context, now time.Time, askable []string, limit int) ([]commands.DueCheck, error) {
	rows, err := d.views.DueChecks(ctx, now, slices.Sorted(slices.Values(askable)), limit)
	if err != nil {
		return nil, err
	}
	out := make([]commands.DueCheck, len(rows))
	for i, r := range rows {
		out[i] = commands.DueCheck{DeliveryID: r.ID, Provider: r.Provider, State: r.State, CheckAt: r.CheckAt, GiveUpAt: r.GiveUpAt}
	}
	return out, nil
}
