package main

import (
	"fmt"
	"slices"

	"github.com/deliveryledger/ledger/adapters/providers/sms"
	"github.com/deliveryledger/ledger/domain"
)

// smsVerdict is what the checker found about the SMS deliveries.
type smsVerdict struct {
	Deliveries, Delivered, Dead, Unknown int
	// The unknown SMS by what made them unknown (see verdict).
	UnknownCall, UnknownStopped, UnknownNoReceipt int
	// Awaiting counts the SMS still processing at the end: accepted by a provider, and neither
	// a receipt, a lookup nor receipt_max_wait decided them.
	Awaiting int
	// FailedOver counts the SMS with an attempt that passed a provider over.
	FailedOver int
	// TwilioSends and VonageSends count the messages each fake took.
	TwilioSends, VonageSends int
	// Duplicates counts the messages beyond the first to a number the fakes deliver to: the
	// person got the text again. ByUnknown are explained by an unknown outcome in the history
	// (the ledger said it could not know), Unexplained by nothing.
	Duplicates, ByUnknown, Unexplained int
}

// checkSMS checks the SMS deliveries against what the fakes took: each ends delivered, dead or
// unknown (none still awaits a receipt); a delivered one went to a number the fakes deliver to,
// and one the fakes deliver to did not die; no delivery was sent more times than it has attempts;
// a message sent twice to a phone is explained by an unknown outcome; every message id the
// history names is one the fake took; the Twilio fake's list holds no message its log lacks; and
// once the Twilio fake is gone, attempts fail over to Vonage.
func checkSMS(v *verdict, ev evidence, histories map[string]*history) {
	s := &v.SMS
	byDelivery := map[string][]smsSend{}
	strays := 0
	logged := map[string]bool{}
	for _, m := range ev.sends {
		switch m.Provider {
		case twilioProvider:
			s.TwilioSends++
			logged[m.ID] = true
		case vonageProvider:
			s.VonageSends++
		}
		key, ok := keyOfText(m.Text)
		id, accepted := ev.ids[key]
		if !ok || !accepted {
			strays++
			continue
		}
		byDelivery[id] = append(byDelivery[id], m)
	}
	if strays > 0 {
		v.fail("the SMS fakes took %d messages that no accepted delivery explains", strays)
	}

	var overSent, falseDelivered, wrongDead, unmatched int
	attemptsAfterKill := false
	for _, id := range sortedKeys(histories) {
		h := histories[id]
		if h.d.Channel() != sms.Name {
			continue
		}
		s.Deliveries++
		state := h.d.State()
		switch state {
		case domain.StateDelivered:
			s.Delivered++
		case domain.StateDead:
			s.Dead++
		case domain.StateUnknown:
			s.Unknown++
			switch unknownCause(h.unknown[h.d.Attempt()]) {
			case causeStopped:
				s.UnknownStopped++
			case causeNoReceipt:
				s.UnknownNoReceipt++
			default:
				s.UnknownCall++
			}
		case domain.StateProcessing:
			s.Awaiting++
			v.example(id, "an SMS still processing after the settle phase")
		}
		if h.failedOver {
			s.FailedOver++
		}
		for _, at := range h.startedAt {
			attemptsAfterKill = attemptsAfterKill || (!ev.twilioKilledAt.IsZero() && at.After(ev.twilioKilledAt))
		}

		sends := byDelivery[id]
		if len(sends) > len(h.started) {
			overSent++
			v.example(id, fmt.Sprintf("the SMS fakes took %d messages, the history has %d attempts", len(sends), len(h.started)))
		}
		fate := smsFateOf(h.d.Recipient())
		switch {
		case fate != smsDelivered && state == domain.StateDelivered:
			falseDelivered++
			v.example(id, "delivered to a number the fakes never deliver to")
		case fate == smsDelivered && state == domain.StateDead:
			wrongDead++
			v.example(id, "dead, to a number the fakes deliver to")
		}
		if fate == smsDelivered && len(sends) > 1 {
			extra := len(sends) - 1
			s.Duplicates += extra
			if len(h.unknown) > 0 {
				s.ByUnknown += extra
			} else {
				s.Unexplained += extra
				v.example(id, "an SMS the fakes delivered more than once, and no unknown outcome in the history")
			}
		}
		for _, acc := range h.acceptances {
			took := slices.ContainsFunc(sends, func(m smsSend) bool {
				return m.Provider == acc.Provider && m.ID == acc.ProviderOperationID
			})
			if !took {
				unmatched++
				v.example(id, fmt.Sprintf("attempt %d accepted by %s as %s, which the fake never took", acc.Attempt, acc.Provider, acc.ProviderOperationID))
			}
		}
	}
	if s.Awaiting > 0 {
		v.fail("%d SMS deliveries are still processing (awaiting a receipt) after the settle phase", s.Awaiting)
	}
	if overSent > 0 {
		v.fail("%d SMS deliveries were sent by the fakes more times than their attempts explain", overSent)
	}
	if falseDelivered > 0 {
		v.fail("%d SMS deliveries are delivered to numbers the fakes never deliver to", falseDelivered)
	}
	if wrongDead > 0 {
		v.fail("%d SMS deliveries to numbers the fakes deliver to ended dead", wrongDead)
	}
	if s.Unexplained > 0 {
		v.fail("%d SMS reached a phone again without an unknown outcome to explain it", s.Unexplained)
	}
	if unmatched > 0 {
		v.fail("%d provider acceptances in the histories name a message the fake never took", unmatched)
	}
	missing := 0
	for _, sid := range ev.twilioListed {
		if !logged[sid] {
			missing++
		}
	}
	if missing > 0 {
		v.fail("the Twilio fake listed %d messages that its log does not show (the sends check would miss them)", missing)
	}
	if attemptsAfterKill && s.FailedOver == 0 {
		v.fail("SMS attempts started after the Twilio fake was killed, and none failed over to Vonage")
	}
}
