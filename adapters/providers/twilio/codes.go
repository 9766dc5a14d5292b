package twilio

import (
	"github.com/deliveryledger/ledger/commands"
	"github.com/deliveryledger/ledger/domain"
)

// This file holds what Twilio's codes and statuses mean to the ledger, as data. The sources are
// Twilio's error dictionary (https://www.twilio.com/docs/api/errors/<code>) and the Messages
// resource's status values (https://www.twilio.com/docs/messaging/api/message-resource).

// apiClass is what an error answer to a create means.
type apiClass struct {
	kind domain.OutcomeKind
	// providerFault: the answer counts against the provider's health (its credentials, its
	// account, its sender, its load), not against the recipient.
	providerFault bool
}

var (
	recipientRefused = apiClass{kind: domain.OutcomePermanent}
	providerRefused  = apiClass{kind: domain.OutcomePermanent, providerFault: true}
	notProcessed     = apiClass{kind: domain.OutcomeTransient, providerFault: true}
)

// apiCodes classifies the error codes of a create that say more than their HTTP status. Twilio
// answers each of these without creating a message: a request it refused cannot have sent
// anything. A code not listed falls back to the HTTP status (see classifyStatus).
var apiCodes = map[int]apiClass{
	// 20429 Too Many Requests: "An API Request that receives an error 429 response is never
	// processed and is always safe to retry."
	20429: notProcessed,
	// 21611 This 'From' number has exceeded the maximum number of queued messages: refused at
	// creation, the sender's backlog is the provider's, and it drains.
	21611: notProcessed,

	// 20003 Permission Denied (Authenticate): wrong account SID or auth token, a deleted token,
	// a suspended or closed account. Retrying this attempt will not mend it, and every other
	// message of this provider fails alike: it counts against the provider, so that failover
	// moves on.
	20003: providerRefused,
	// 20005 Account not active.
	20005: providerRefused,
	// 20403 403 Forbidden: "the account has been suspended or closed".
	20403: providerRefused,
	// 20404 The requested resource was not found, on a create: the account's path does not
	// exist (a wrong account_sid or base_url), for every message of this provider.
	20404: providerRefused,
	// 21606 The 'From' phone number provided is not a valid message-capable Twilio phone
	// number for this destination/account: the provider's sender, not the recipient.
	21606: providerRefused,

	// 21211 Invalid 'To' Phone Number.
	21211: recipientRefused,
	// 21408 Permission to send an SMS has not been enabled for the region indicated by the 'To'
	// number: the account's geographic permissions close the recipient's country.
	21408: recipientRefused,
	// 21610 Attempt to send to unsubscribed recipient: the person replied STOP; carriers
	// require that it be honoured.
	21610: recipientRefused,
	// 21612 The 'To' phone number is not currently reachable via SMS (this To/From pair
	// cannot be connected).
	21612: recipientRefused,
	// 21614 'To' number is not a valid mobile number: it cannot receive SMS.
	21614: recipientRefused,
	// 21635 'To' number cannot be a landline.
	21635: recipientRefused,
	// 21608 The 'To' phone number is not verified for this (trial) account.
	21608: recipientRefused,
	// 21602 Message body is required; 21617 the message body exceeds the 1600 character limit:
	// the payload, which the channel's Check should have refused.
	21602: recipientRefused,
	21617: recipientRefused,
}

// suppressingAPICodes are the error codes of a create that are hard evidence that the number
// takes no more messages (Outcome.Suppress): the person opted out, or the number cannot take
// an SMS at all. Every other refusal suppresses nothing: 21612 (this To/From pair, not the
// number), 21408 (the account's regions), 21608 (a trial account's list), 21635, the payload,
// the account's and the moment's.
var suppressingAPICodes = map[int]string{
	21610: "unsubscribed recipient: the person replied STOP",
	21614: "not a mobile number: it cannot receive SMS",
	21211: "invalid 'To' phone number",
}

// classifyAPIError classifies an error answer to a create: its code when the table knows it,
// else its HTTP status.
func classifyAPIError(status, code int) apiClass {
	if c, ok := apiCodes[code]; ok {
		return c
	}
	switch {
	case status == 429:
		// Whatever the code: Twilio documents a 429 as never processed.
		return notProcessed
	case status == 401:
		// The credentials, whatever the code.
		return providerRefused
	case status >= 500 && status < 600:
		// Twilio's servers in trouble, or a proxy in front of them: the message may have been
		// created before the failure, so only a lookup can tell.
		return apiClass{kind: domain.OutcomeUnknown, providerFault: true}
	case status >= 300 && status < 400:
		// Not Twilio answering (the API never redirects): base_url is wrong, for every
		// message of this provider.
		return providerRefused
	}
	// Any other 4xx: this request will not succeed by itself (a parameter Twilio refuses).
	return recipientRefused
}

// Message statuses (the Messages resource's status values).
const (
	statusQueued      = "queued"
	statusAccepted    = "accepted"
	statusScheduled   = "scheduled"
	statusSending     = "sending"
	statusSent        = "sent"
	statusDelivered   = "delivered"
	statusRead        = "read"
	statusUndelivered = "undelivered"
	statusFailed      = "failed"
	statusCanceled    = "canceled"
)

// statuses reads Twilio's message statuses in the ledger's terms. undelivered and failed are
// read further by their error code (carrierCodes). A status not listed (receiving and received
// are inbound; partially_delivered and future ones) is pending: it changes nothing, and a later
// word, a lookup or the receipt deadline decides.
var statuses = map[string]commands.ReceiptStatus{
	statusQueued:    commands.ReceiptPending, // waiting in the sender's queue
	statusAccepted:  commands.ReceiptPending, // taken by a Messaging Service, no sender yet
	statusScheduled: commands.ReceiptPending, // to be sent at a set time
	statusSending:   commands.ReceiptPending, // being handed to the carrier
	statusSent:      commands.ReceiptPending, // the carrier has it; no delivery receipt yet
	statusDelivered: commands.ReceiptDelivered,
	statusRead:      commands.ReceiptDelivered, // read receipt (channels that have them): past delivered
	// undelivered: the carrier could not deliver it; failed: Twilio could not send it.
	statusUndelivered: commands.ReceiptFailed,
	statusFailed:      commands.ReceiptFailed,
	// canceled: a scheduled message someone canceled: on purpose, so not retried.
	statusCanceled: commands.ReceiptFailed,
}

// carrierCode is what an undelivered or failed message's error code says.
type carrierCode struct {
	// retry: another attempt may mend it (the failure was the moment's, not the number's).
	retry bool
	what  string
}

// carrierCodes are the error codes of messages that were undelivered or failed. A code not
// listed reads as failed: the ledger does not resend on a guess, and a number that cannot take
// a message does not start to by being sent more.
var carrierCodes = map[string]carrierCode{
	// 30001 Queue overflow: sent too fast for the sender's throughput; the queue drains.
	"30001": {retry: true, what: "queue overflow"},
	// 30002 Account suspended after the message was queued: the account's trouble, not the
	// recipient's; another provider, or this one once the account is restored, can send it.
	"30002": {retry: true, what: "account suspended"},
	// 30003 Unreachable destination handset: powered off, no signal, roaming off-network;
	// Twilio: "a one-time downstream issue can cause a transient delivery failure".
	"30003": {retry: true, what: "unreachable destination handset"},
	// 30008 Unknown error from the carrier; Twilio's advice is to send again.
	"30008": {retry: true, what: "unknown carrier error"},
	// 30500 Twilio internal error; Twilio: "try sending the message again".
	"30500": {retry: true, what: "Twilio internal error"},

	// Not mended by sending again:
	"30004": {what: "message blocked (by the recipient or their carrier)"},
	"30005": {what: "unknown destination handset (the number is not in service)"},
	"30006": {what: "landline or unreachable carrier"},
	"30007": {what: "message filtered (carrier spam or content filtering)"},
	"30010": {what: "message price exceeds the max price"},
	"30034": {what: "US A2P 10DLC: the sender is not registered"},
}

// suppressingCarrierCodes are the error codes of an undelivered or failed message that are
// hard evidence that the number takes no more messages (Receipt.Suppress): it is not in
// service, or it is a landline. Every other code suppresses nothing: 30004 (blocked: by the
// recipient or a carrier, which the code does not tell apart), 30007 (this message's content),
// 30003 and the other retried codes (the moment's).
var suppressingCarrierCodes = map[string]string{
	"30005": "unknown destination handset: the number is not in service",
	"30006": "landline or unreachable carrier: the number cannot receive SMS",
}

// receiptSuppresses reports whether a message's status and error code are hard evidence
// against the number: undelivered or failed with one of suppressingCarrierCodes. A canceled
// message was canceled on purpose, whatever its code.
func receiptSuppresses(status, errorCode string) bool {
	return (status == statusUndelivered || status == statusFailed) && suppressingCarrierCodes[errorCode] != ""
}

// receiptStatus reads a message's status and error code in the ledger's terms, with a
// description of the code for the history when Twilio gave no text.
func receiptStatus(status, errorCode string) (commands.ReceiptStatus, string) {
	st, ok := statuses[status]
	if !ok {
		return commands.ReceiptPending, ""
	}
	cc, known := carrierCodes[errorCode]
	if st == commands.ReceiptFailed && status != statusCanceled && cc.retry {
		st = commands.ReceiptRetry
	}
	if known {
		return st, cc.what
	}
	return st, ""
}
