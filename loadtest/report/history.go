package report

import (
	"fmt"
	"io"
)

// History is the history checker's verdict over the run's partitions
// (verify.CheckHistory): every produce attempt's answer and every read
// checked against the whole log, markers included.
type History struct {
	Answers   int `json:"answers"`
	Committed int `json:"committed"`
	Refused   int `json:"refused"`
	Unknown   int `json:"unknown"`
	// UnknownLanded is not a verdict (UnknownLandedWhy): an outcome
	// unknown may have committed, and a batch that did is held to land
	// whole (PartialBatches), once per generation (Duplicates), and once
	// in the ledger (LedgerCheck counts an extra batch there twice as
	// duplicated).
	UnknownLanded int `json:"unknown_landed"`
	// The findings: each must be 0 for the run to pass.
	AbortedReads     int `json:"aborted_reads"`
	ShortReads       int `json:"short_reads"`
	LostWrites       int `json:"lost_writes"`
	EmptyAcks        int `json:"acks_without_offsets"`
	RefusedCommitted int `json:"refused_committed"`
	PartialBatches   int `json:"partial_batches"`
	Duplicates       int `json:"duplicates"`
	DelayedCommits   int `json:"delayed_commits"`
	// Retried counts records committed under more than one generation
	// (retried after an unknown outcome): allowed, the ledger keeps one.
	Retried  int      `json:"retried"`
	Examples []string `json:"examples,omitempty"`
}

// UnknownLandedWhy is why UnknownLanded is a figure and not a verdict.
const UnknownLandedWhy = "not a verdict: an outcome unknown may have committed; each that did is held to land whole, and to be in the ledger once"

// Pass says whether the history found nothing.
func (h History) Pass() bool {
	return h.findings() == 0
}

func (h History) findings() int {
	return h.AbortedReads + h.ShortReads + h.LostWrites + h.EmptyAcks + h.RefusedCommitted + h.PartialBatches + h.Duplicates + h.DelayedCommits
}

func (h History) write(w io.Writer) {
	fmt.Fprintf(w, "history: %d answers (%d committed, %d refused, %d unknown, %d of them landed, %s); aborted reads %d, short reads %d, lost writes %d, "+
		"acks without offsets %d, definite refusals committed %d, batches committed in part %d, duplicates in a generation %d, delayed commits %d; "+
		"retried under a new generation %d\n",
		h.Answers, h.Committed, h.Refused, h.Unknown, h.UnknownLanded, UnknownLandedWhy, h.AbortedReads, h.ShortReads, h.LostWrites,
		h.EmptyAcks, h.RefusedCommitted, h.PartialBatches, h.Duplicates, h.DelayedCommits, h.Retried)
	for _, ex := range h.Examples {
		fmt.Fprintf(w, "- %s\n", ex)
	}
}

// NetFault is what the run's network faults were (--net-fault) and how
// the fleet recovered: the time from each fault's end to the first batch
// acknowledged after it, at most.
type NetFault struct {
	Kind               string  `json:"kind"`
	Link               string  `json:"link"`
	EverySeconds       float64 `json:"every_s"`
	ForSeconds         float64 `json:"for_s"`
	Rounds             int     `json:"rounds"`
	RecoveryMaxSeconds float64 `json:"recovery_max_s"`
	// Unrecovered counts faults after which no batch was acknowledged,
	// a failure; NotJudged those that ended too near the end of the run
	// for a batch to follow (NotJudgedWhy), a figure and not a verdict.
	Unrecovered  int    `json:"unrecovered"`
	NotJudged    int    `json:"not_judged"`
	NotJudgedWhy string `json:"not_judged_why,omitempty"`
}

func (n *NetFault) write(w io.Writer) {
	if n == nil {
		return
	}
	fmt.Fprintf(w, "network fault: %s on %s for %.1fs every %.1fs, %d rounds; recovery (fault end to the next acknowledged batch) at most %.2fs; rounds never recovered %d",
		n.Kind, n.Link, n.ForSeconds, n.EverySeconds, n.Rounds, n.RecoveryMaxSeconds, n.Unrecovered)
	if n.NotJudged > 0 {
		fmt.Fprintf(w, "; not judged %d (%s)", n.NotJudged, n.NotJudgedWhy)
	}
	fmt.Fprintln(w)
}
