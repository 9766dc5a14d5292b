package vonage

import (
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// submitStatus is what one status of the SMS API's answer (messages[].status) means for the
// attempt. Every non-zero status says the message was not accepted, so none of them is unknown:
// the line runs between a refusal that may pass later (transient) and one that will not
// (permanent), and between a refusal that is the provider's or the account's (ProviderFault:
// every message through this provider would meet it) and one that is this recipient's or this
// message's.
type submitStatus struct {
	meaning       string
	kind          domain.OutcomeKind
	providerFault bool
}

// submitStatuses is the SMS API's status table, from Vonage's "Troubleshooting SMS" guide
// (https://developer.vonage.com/messaging/sms/guides/troubleshooting-sms, "SMS API error codes")
// and the x-errors of its OpenAPI description (github.com/Nexmo/api-specification,
// definitions/sms.yml). Codes 13 and 34 are from Vonage's older error list and its SDKs
// (STATUS_COMMS_FAILURE; "Invalid or Missing Msisdn Param"), which the current table no longer
// shows but which older accounts and routes still answer. A status not listed is permanent and
// not the provider's fault, with Vonage's error-text recorded.
var submitStatuses = map[string]submitStatus{
	// 1 Throttled: faster than the account's throughput limit. Back off and send again.
	"1": {"Throttled", domain.OutcomeTransient, true},
	// 2 Missing Parameters: one of from, to, api_key, api_secret or text is missing. The adapter
	// always sends them, so the configuration (or the adapter) is at fault, for every message.
	"2": {"Missing Parameters", domain.OutcomePermanent, true},
	// 3 Invalid Parameters: the value of a parameter is invalid; in practice the to number
	// ("Invalid to param"), the sender being checked by Validate. The error-text says which.
	"3": {"Invalid Parameters", domain.OutcomePermanent, false},
	// 4 Invalid Credentials: the API key or secret is wrong, invalid or disabled.
	"4": {"Invalid Credentials", domain.OutcomePermanent, true},
	// 5 Internal Error: the platform failed while processing the message; it was not accepted.
	"5": {"Internal Error", domain.OutcomeTransient, true},
	// 6 Invalid Message: the platform could not process this message, e.g. an unrecognised
	// number prefix.
	"6": {"Invalid Message", domain.OutcomePermanent, false},
	// 7 Number Barred: the destination is on the barred list and may not receive messages.
	"7": {"Number Barred", domain.OutcomePermanent, false},
	// 8 Partner Account Barred: the account is suspended. Only support can lift it.
	"8": {"Partner Account Barred", domain.OutcomePermanent, true},
	// 9 Partner Quota Violation: not enough credit. "Top-up and retry": the message is fine and
	// will go once the account is topped up, so it waits (and may fail over) rather than dies.
	"9": {"Partner Quota Violation", domain.OutcomeTransient, true},
	// 10 Too Many Existing Binds: more simultaneous connections than the account allows.
	// "Back-off and retry".
	"10": {"Too Many Existing Binds", domain.OutcomeTransient, true},
	// 11 Account Not Enabled For HTTP: the account is provisioned for SMPP only.
	"11": {"Account Not Enabled For HTTP", domain.OutcomePermanent, true},
	// 12 Message Too Long: this message's text exceeds the maximum allowed.
	"12": {"Message Too Long", domain.OutcomePermanent, false},
	// 13 Communication Failed (older table): the message was not submitted because of a
	// communication failure inside the platform.
	"13": {"Communication Failed", domain.OutcomeTransient, true},
	// 14 Invalid Signature: the adapter does not sign; an account that requires signed requests
	// refuses every message.
	"14": {"Invalid Signature", domain.OutcomePermanent, true},
	// 15 Invalid Sender Address: the sender id is not authorised for this destination (most
	// commonly North America, which wants a Vonage number). It depends on the destination's
	// country: the provider is healthy and serves other destinations, so it is not its fault.
	"15": {"Invalid Sender Address", domain.OutcomePermanent, false},
	// 22 Invalid Network Code: the adapter sends no network-code, so this is the provider's.
	"22": {"Invalid Network Code", domain.OutcomePermanent, true},
	// 23 Invalid Callback URL: the configured callback is too long or has illegal characters:
	// every message would meet it.
	"23": {"Invalid Callback URL", domain.OutcomePermanent, true},
	// 29 Non-Whitelisted Destination: the account is in demo mode and this number is not on its
	// list; other (listed) numbers go through.
	"29": {"Non-Whitelisted Destination", domain.OutcomePermanent, false},
	// 32 Signature And API Secret Disallowed: a signing account refuses the api_secret the
	// adapter sends, for every message.
	"32": {"Signature And API Secret Disallowed", domain.OutcomePermanent, true},
	// 33 Number De-activated: the destination is de-activated and may not receive messages.
	"33": {"Number De-activated", domain.OutcomePermanent, false},
	// 34 Invalid or Missing Msisdn Param (older table): the to number is missing or invalid.
	"34": {"Invalid or Missing Msisdn Param", domain.OutcomePermanent, false},
}

// suppressingStatuses are the SMS API statuses that are hard evidence that the number takes no
// more messages (Outcome.Suppress): Vonage's own list bars it. Every other refusal suppresses
// nothing: 3 and 34 (a parameter, perhaps ours), 6 (an unrecognised prefix), 29 (a demo
// account's list), 15 (the sender, for this country), the account's and the moment's.
var suppressingStatuses = map[string]string{
	"7":  "Number Barred: the destination is on the barred list",
	"33": "Number De-activated: the destination may not receive messages",
}

// statusOf looks a status up; one not listed is permanent and not the provider's fault.
func statusOf(code string) submitStatus {
	if s, ok := submitStatuses[code]; ok {
		return s
	}
	return submitStatus{meaning: "a status Vonage does not document", kind: domain.OutcomePermanent}
}

// receiptCode is what a delivery receipt's err-code means when its status is failed or
// rejected: whether a new attempt may mend it.
type receiptCode struct {
	meaning string
	status  commands.ReceiptStatus
}

// receiptCodes is the delivery receipt's err-code table, from Vonage's "Delivery receipts" guide
// (https://developer.vonage.com/messaging/sms/guides/delivery-receipts, "DLR error codes"). The
// guide says "retry" for 2, 7 and 8 and "permanent" or "remove from your database" for 3 and 4;
// the others are judged from its description. An err-code not listed leaves the receipt failed:
// an operator may replay a dead delivery, while a wrong retry sends the recipient the message
// again.
var receiptCodes = map[string]receiptCode{
	// 1 Unknown: not delivered, and no reason could be determined. Only another attempt can tell.
	"1": {"Unknown", commands.ReceiptRetry},
	// 2 Absent Subscriber - Temporary: the handset was temporarily unavailable (out of coverage,
	// switched off). The guide: retry.
	"2": {"Absent Subscriber - Temporary", commands.ReceiptRetry},
	// 3 Absent Subscriber - Permanent: the number is no longer active.
	"3": {"Absent Subscriber - Permanent", commands.ReceiptFailed},
	// 4 Call Barred by User: permanent until the user has the bar removed.
	"4": {"Call Barred by User", commands.ReceiptFailed},
	// 5 Portability Error: an issue with the number's portability that the network operator
	// must resolve; a new attempt meets it again.
	"5": {"Portability Error", commands.ReceiptFailed},
	// 6 Anti-Spam Rejection: a carrier's anti-spam filter blocked this message; the same text
	// is blocked again.
	"6": {"Anti-Spam Rejection", commands.ReceiptFailed},
	// 7 Handset Busy: not available at the time. The guide: retry.
	"7": {"Handset Busy", commands.ReceiptRetry},
	// 8 Network Error: the guide: retry.
	"8": {"Network Error", commands.ReceiptRetry},
	// 9 Illegal Number: not a malformed number but an opt-out: "the user has specifically
	// requested not to receive messages from a specific service".
	"9": {"Illegal Number", commands.ReceiptFailed},
	// 10 Illegal Message: an error in a message parameter (a wrong encoding flag).
	"10": {"Illegal Message", commands.ReceiptFailed},
	// 11 Unroutable: Vonage finds no route for the message; support must be contacted.
	"11": {"Unroutable", commands.ReceiptFailed},
	// 12 Destination Unreachable: "a route to the number cannot be found - confirm the
	// recipient's number". The guide points at the number, not at a passing condition.
	"12": {"Destination Unreachable", commands.ReceiptFailed},
	// 13 Subscriber Age Restriction: the recipient cannot receive it because of their age.
	"13": {"Subscriber Age Restriction", commands.ReceiptFailed},
	// 14 Number Blocked by Carrier: the recipient must have SMS enabled on their plan.
	"14": {"Number Blocked by Carrier", commands.ReceiptFailed},
	// 15 Prepaid Insufficient Funds: the recipient's prepaid plan lacks the credit to receive;
	// a later attempt may find it topped up.
	"15": {"Prepaid Insufficient Funds", commands.ReceiptRetry},
	// 99 General Error: typically an error in the route. Vonage's adaptive routing may take
	// another route for a new attempt, which the attempt limit bounds.
	"99": {"General Error", commands.ReceiptRetry},
}

// suppressingReceiptCodes are the err-codes of a failed or rejected delivery receipt that are
// hard evidence that the number takes no more messages (Receipt.Suppress): those the guide
// calls permanent ("remove from your database": 3, 4) and the recipient's opt-out (9). Every
// other err-code suppresses nothing: 5, 6 and 10-14 are this message's, a route's or a plan's,
// however final for the attempt, and the retried ones the moment's.
var suppressingReceiptCodes = map[string]string{
	"3": "Absent Subscriber - Permanent: the number is no longer active",
	"4": "Call Barred by User",
	"9": "Illegal Number: the user asked not to receive messages from this service",
}
