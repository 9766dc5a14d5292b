package twilio

import (
	"testing"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestClassifyAPIError: the table of codes first, then the HTTP status.
func TestClassifyAPIError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status, code int
		want         apiClass
	}{
		{400, 21211, recipientRefused},
		{400, 21610, recipientRefused},
		{400, 21614, recipientRefused},
		{400, 21408, recipientRefused},
		{429, 20429, notProcessed},
		{503, 20429, notProcessed}, // the code says not processed, whatever the status
		{429, 0, notProcessed},
		{401, 20003, providerRefused},
		{401, 0, providerRefused},
		{403, 20003, providerRefused},
		{403, 20403, providerRefused},
		{400, 21606, providerRefused},
		{400, 21611, notProcessed},
		{500, 20500, apiClass{kind: domain.OutcomeUnknown, providerFault: true}},
		{503, 0, apiClass{kind: domain.OutcomeUnknown, providerFault: true}},
		{302, 0, providerRefused},
		{404, 20404, providerRefused},
		{404, 0, recipientRefused},
		{400, 0, recipientRefused},
		{422, 99999, recipientRefused},
	}
	for _, tt := range tests {
		if got := classifyAPIError(tt.status, tt.code); got != tt.want {
			t.Errorf("classifyAPIError(%d, %d) = %+v, want %+v", tt.status, tt.code, got, tt.want)
		}
	}
}

// TestCodeTablesAreConsistent: every permanent code is permanent, every retry code belongs to a
// failure, and every status the tables name is one of Twilio's.
func TestCodeTablesAreConsistent(t *testing.T) {
	t.Parallel()
	for code, c := range apiCodes {
		switch c.kind {
		case domain.OutcomePermanent, domain.OutcomeTransient:
		default:
			t.Errorf("apiCodes[%d] is %s: a refused create is permanent or transient, never unknown", code, c.kind)
		}
		if c.kind == domain.OutcomeTransient && !c.providerFault {
			t.Errorf("apiCodes[%d] is transient without a provider fault", code)
		}
	}
	for code, c := range carrierCodes {
		if c.what == "" {
			t.Errorf("carrierCodes[%s] has no description", code)
		}
		st, what := receiptStatus(statusUndelivered, code)
		if want := map[bool]commands.ReceiptStatus{true: commands.ReceiptRetry, false: commands.ReceiptFailed}[c.retry]; st != want || what != c.what {
			t.Errorf("receiptStatus(undelivered, %s) = %s %q, want %s %q", code, st, what, want, c.what)
		}
	}
	if st, _ := receiptStatus(statusDelivered, "30003"); st != commands.ReceiptDelivered {
		t.Errorf("a delivered message with a code is %s, want delivered", st)
	}
}

// TestSuppressingCodesArePermanentRefusalsOfTheNumber: a code that suppresses the number is one
// the classification already reads as the recipient's permanent refusal (a create's) or as a
// failed message that is not retried (a receipt's): evidence against a number never comes from
// an answer that says try again, or that blames the account.
func TestSuppressingCodesArePermanentRefusalsOfTheNumber(t *testing.T) {
	t.Parallel()
	for code := range suppressingAPICodes {
		if c := classifyAPIError(400, code); c != recipientRefused {
			t.Errorf("create code %d suppresses but is classified %+v, want a permanent refusal of the recipient", code, c)
		}
	}
	for code := range suppressingCarrierCodes {
		for _, status := range []string{statusUndelivered, statusFailed} {
			if st, _ := receiptStatus(status, code); st != commands.ReceiptFailed || !receiptSuppresses(status, code) {
				t.Errorf("%s %s suppresses but reads as %s (suppresses %t), want failed", status, code, st, receiptSuppresses(status, code))
			}
		}
		if receiptSuppresses(statusCanceled, code) || receiptSuppresses(statusDelivered, code) {
			t.Errorf("%s suppresses on a canceled or delivered message", code)
		}
	}
}
