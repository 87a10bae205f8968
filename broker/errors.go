package broker

import (
	"net/http"
	"time"
)

// refusal is one row of the broker's error table: the status and fixed text
// a guest sees, and the class the audit record names. Guests never see
// anything else: no upstream URL, header, status, exception text or
// credential.
type refusal struct {
	status int
	text   string
	class  string
}

var (
	refInvalidURL = refusal{http.StatusBadRequest, "invalid URL", "invalid_url"}
	refNotFound   = refusal{http.StatusNotFound, "not found", "not_found"}
	refHeader     = refusal{http.StatusForbidden, "forbidden header", "forbidden_header"}
	refCredential = refusal{http.StatusForbidden, "forbidden credential", "forbidden_credential"}
	refHost       = refusal{http.StatusForbidden, "forbidden host", "forbidden_host"}
	refTurnEnded  = refusal{http.StatusGone, "turn ended", "turn_ended"}
	refBusy       = refusal{http.StatusTooManyRequests, "call budget exhausted or busy", "budget_or_busy"}
	// refDailyBudget is ours: a daily budget (broker calls or model tokens
	// of the speaker, the channel or the installation) is spent.
	refDailyBudget  = refusal{http.StatusTooManyRequests, "daily budget exhausted", "daily_budget"}
	refInvalidInput = refusal{http.StatusBadRequest, "invalid input", "invalid_input"}
	refMCP          = refusal{http.StatusForbidden, "MCP method or tool refused", "mcp_refused"}
	refModelPayload = refusal{http.StatusBadRequest, "text/function model payload required", "model_payload"}
	// refArguments is ours: arguments that fail the declared JSON Schema are
	// refused before any callback or upstream call.
	refArguments  = refusal{http.StatusBadRequest, "invalid tool arguments", "invalid_arguments"}
	refFailed     = refusal{http.StatusBadGateway, "broker call failed", "call_failed"}
	refBadRequest = refusal{http.StatusBadRequest, "bad request", "bad_request"}
)

// outcome is what one call produced: the response and what the audit
// record and the observer need. detail is for the operator log only and
// never contains a body, a header or a credential.
type outcome struct {
	status  int
	body    []byte
	json    bool
	class   string
	detail  string
	bytesIn int
	// upstream is the time spent in the upstream call (model, MCP, host
	// tool), 0 when none was made; reflected marks an answer refused for
	// echoing the credential.
	upstream  time.Duration
	reflected bool

	// header holds headers passed on from the upstream (writeOutcome
	// adds them).
	header http.Header
	// written marks an answer the route wrote itself, passed on as it
	// arrived; sent counts its body bytes. abort asks ServeHTTP to cut
	// the connection: the answer broke off after its head.
	written bool
	sent    int64
	abort   bool
	// tokens is the usage counted from a streamed answer's events, when
	// counted.
	tokens  int64
	counted bool
	// upstreamStatus is the status the upstream answered (0 when none
	// came), and errBody the start of an error answer's body as passed
	// on, for a session's failure log (Turn.errLog).
	upstreamStatus int
	errBody        []byte
	// release, when set, hands body's buffer back once the answer is
	// written (upstream.Client.PostJSON).
	release func()
	// usage is the answer's top-level usage member as the reflection
	// scan found it (nil when there is none), when usageKnown: then
	// usedTokens need not decode body again.
	usage      []byte
	usageKnown bool
}

func refuse(r refusal) outcome {
	return outcome{status: r.status, body: []byte(r.text), class: r.class}
}

func fail(detail string) outcome {
	o := refuse(refFailed)
	o.detail = detail
	return o
}

// missingKey is the outcome of a model call whose credential is empty or
// could not be read; err, when there is one, names the variable (never its
// value) for the operator's record.
func missingKey(err error) outcome {
	if err != nil {
		return fail("model credential missing: " + err.Error())
	}
	return fail("model credential missing")
}

func okJSON(body []byte) outcome {
	return outcome{status: statusOK, body: body, json: true}
}

// bytesOut is the body bytes the worker got.
func (o outcome) bytesOut() int64 {
	if o.written {
		return o.sent
	}
	return int64(len(o.body))
}
