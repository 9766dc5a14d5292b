package vonage

import (
	"testing"

	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// TestSuppressingCodesArePermanentRefusalsOfTheNumber: a status or err-code that suppresses the
// number is one the tables already read as final and as the recipient's, never the provider's
// nor one to retry: evidence against a number never comes from an answer that says try again.
func TestSuppressingCodesArePermanentRefusalsOfTheNumber(t *testing.T) {
	t.Parallel()
	for code := range suppressingStatuses {
		if st := statusOf(code); st.kind != domain.OutcomePermanent || st.providerFault {
			t.Errorf("status %s suppresses but is %+v, want permanent and not the provider's fault", code, st)
		}
	}
	for code := range suppressingReceiptCodes {
		if st, _ := failedReceipt(code); st != commands.ReceiptFailed {
			t.Errorf("err-code %s suppresses but a failed receipt with it is %s, want failed", code, st)
		}
	}
}
