package loadtest

import (
	sdk "github.com/fencegate/fencegate/client"
	"github.com/fencegate/fencegate/verify"
)

// The layers that answer a produce of a generation a later one overtook.
const (
	layerCommitted      = "committed"       // 200: committed before the new barrier (the log decides)
	layerBrokerFence    = "broker_fence"    // the epoch bump fenced the old producer
	layerLocalDeadline  = "local_deadline"  // the gateway's local deadline passed
	layerSessionCheck   = "session_check"   // the session is gone or of another token
	layerOutcomeUnknown = "outcome_unknown" // generation_ended for another cause
	layerTransport      = "transport"       // no answer
)

// layer names which defence answered rep.
func layer(rep reply) string {
	switch {
	case rep.status == 200:
		return layerCommitted
	case rep.status == 0:
		return layerTransport
	case rep.problem.Code == sdk.CodeFenced, rep.problem.Code == sdk.CodeGenerationEnded && rep.problem.Cause == sdk.CodeFenced:
		return layerBrokerFence
	case rep.problem.Code == sdk.CodeLeaseLost && rep.problem.Reason == "expired":
		return layerLocalDeadline
	case rep.problem.Code == sdk.CodeGenerationEnded:
		return layerOutcomeUnknown
	}
	return layerSessionCheck
}

// definite reports whether rep promises that nothing of the batch is or
// will be committed: the SDK's answer table, not a copy of it.
func definite(rep reply) bool {
	return sdk.ProduceOutcome(rep.status, rep.problem.Code) == sdk.OutcomeRefused
}

// answerCode is how an answer is counted: "ok", its problem code, or
// "transport".
func answerCode(rep reply) string {
	switch {
	case rep.status == 200:
		return "ok"
	case rep.problem.Code == "" || rep.status == 0:
		return "transport"
	}
	return rep.problem.Code
}

// historyAnswer is rep's kind for the history checker, by the SDK's
// answer table; a 200's offsets go into op.
func historyAnswer(rep reply, op *verify.Op) verify.Answer {
	switch sdk.ProduceOutcome(rep.status, rep.problem.Code) {
	case sdk.OutcomeCommitted:
		var acked struct {
			Offsets []int64 `json:"offsets"`
		}
		rep.decode(&acked)
		op.Offsets = acked.Offsets
		return verify.AnswerCommitted
	case sdk.OutcomeRefused:
		return verify.AnswerRefused
	}
	return verify.AnswerUnknown
}
