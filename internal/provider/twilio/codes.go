package twilio

import (
	"time"

	"github.com/msgq/msgq/internal/retry"
)

// QueueOverflowDelay is the floor msgq attaches to 30001 (queue overflow)
// when no Retry-After came with it: Twilio queues a sender's messages at
// its send rate (a US long code sends one segment a second) and fails
// those that waited more than the validity period
// (https://www.twilio.com/docs/api/errors/30001), so an immediate retry
// would only overflow the queue again. One minute is our choice.
const QueueOverflowDelay = time.Minute

// codeClasses maps Twilio error codes to retry classes. Each code's page is
// https://www.twilio.com/docs/api/errors/<code>; the list of them all is
// https://www.twilio.com/docs/api/errors. Codes 300xx are not answers to
// the create call: they come later, as the ErrorCode of a failed or
// undelivered message (status callback, Lookup); they are here so that
// one table reads both.
var codeClasses = map[string]retry.Class{
	// The credentials or the account are refused: nothing this message
	// can fix, and every other message of the identity would fail the same
	// way. 20003 authentication error (bad Account SID / Auth Token or API
	// key); 20005 account not active; 20404 the resource (our Account SID
	// in the URL) was not found; 30002 account suspended.
	"20003": retry.Identity, "20005": retry.Identity, "20404": retry.Identity, "30002": retry.Identity,
	// The sender is refused: 21212 invalid From number; 21603 From
	// required; 21606 From is not a message-capable Twilio number for this
	// destination/account; 21601 From is not an SMS-capable number of this
	// account; 21661 From is not SMS-capable; 21703/21704 the Messaging
	// Service has no number to send from; 30032 toll-free number not
	// verified; 30034 US A2P 10DLC message from an unregistered number.
	"21212": retry.Identity, "21603": retry.Identity, "21606": retry.Identity, "21601": retry.Identity,
	"21661": retry.Identity, "21703": retry.Identity, "21704": retry.Identity,
	"30032": retry.Identity, "30034": retry.Identity,

	// Too many requests (API concurrency, 429).
	"20429": retry.RateLimited,
	// Queue overflow: the sender's queue is full (QueueOverflowDelay).
	"30001": retry.RateLimited,

	// The recipient or the message is refused for good. 21211 invalid To;
	// 21604 To required; 21612 To cannot be routed; 21614 To is not a
	// mobile number; 21608 unverified To on a trial account; 21610 the
	// recipient replied STOP (OptedOut); 21408 no permission to send to
	// that region (an account setting, but for one region only: pausing
	// the identity would also stop every other region's messages);
	// 21602 body required; 21617 body over 1600 characters.
	"21211": retry.Permanent, "21604": retry.Permanent, "21612": retry.Permanent, "21614": retry.Permanent,
	"21608": retry.Permanent, "21610": retry.Permanent, "21408": retry.Permanent,
	"21602": retry.Permanent, "21617": retry.Permanent,
	// Delivery failures reported after acceptance: 30004 message blocked;
	// 30005 unknown destination handset; 30006 landline or unreachable
	// carrier; 30007 filtered by the carrier (spam).
	"30004": retry.Permanent, "30005": retry.Permanent, "30006": retry.Permanent, "30007": retry.Permanent,
	// Reported after acceptance, and the same message may get through
	// later: 30003 unreachable destination handset (phone off or out of
	// coverage); 30008 unknown error.
	"30003": retry.Transient, "30008": retry.Transient,
}

var codeDelays = map[string]time.Duration{
	"30001": QueueOverflowDelay,
}

// CodeClass maps one Twilio error code, as Twilio spells it ("21211"), to
// its retry class and the minimum delay msgq attaches to it (0 for none).
// known is false for a code the table does not list; the caller then
// decides by the HTTP status (see classify).
func CodeClass(code string) (class retry.Class, delay time.Duration, known bool) {
	c, ok := codeClasses[code]
	return c, codeDelays[code], ok
}

// OptedOut says code is Twilio's 21610: the recipient replied with an
// opt-out keyword (STOP, ...) to this sender and Twilio refuses every
// message to them until they opt back in
// (https://www.twilio.com/docs/api/errors/21610). The caller may record
// the opt-out so that msgq stops queueing to that number at all.
func OptedOut(code string) bool { return code == "21610" }
