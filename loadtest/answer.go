package loadtest

import "encoding/json"

// The layers that answer a produce of a generation a later one overtook.
const (
	layerCommitted      = "committed"       // 200: committed before the new barrier (the log decides)
	layerBrokerFence    = "broker_fence"    // the epoch bump fenced the old producer
	layerLocalDeadline  = "local_deadline"  // the gateway's local deadline passed
	layerSessionCheck   = "session_check"   // the session is gone or of another token
	layerOutcomeUnknown = "outcome_unknown" // generation_ended for another cause
	layerTransport      = "transport"       // no answer
)

// str returns a string member of a problem document.
func (r reply) str(field string) string {
	var v string
	_ = json.Unmarshal(r.body[field], &v)
	return v
}

// layer names which defence answered rep.
func layer(rep reply) string {
	switch {
	case rep.status == 200:
		return layerCommitted
	case rep.status == 0:
		return layerTransport
	case rep.code == "fenced", rep.code == "generation_ended" && rep.str("cause") == "fenced":
		return layerBrokerFence
	case rep.code == "lease_lost" && rep.str("reason") == "expired":
		return layerLocalDeadline
	case rep.code == "generation_ended":
		return layerOutcomeUnknown
	}
	return layerSessionCheck
}

// definite reports whether rep promises that nothing of the batch is or
// will be committed (the answer table): every 4xx except generation_ended,
// and 503 batch_aborted. Anything else, a transport error included, leaves
// the outcome unknown.
func definite(rep reply) bool {
	switch {
	case rep.code == "batch_aborted":
		return true
	case rep.code == "generation_ended":
		return false
	}
	return rep.status >= 400 && rep.status < 500
}

// answerCode is how an answer is counted: "ok", its problem code, or
// "transport".
func answerCode(rep reply) string {
	switch {
	case rep.status == 200:
		return "ok"
	case rep.code == "" || rep.status == 0:
		return "transport"
	}
	return rep.code
}
