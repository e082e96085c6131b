package loadtest

import (
	"testing"

	"github.com/fencegate/fencegate/loadtest/report"
	"github.com/fencegate/fencegate/verify"
)

// TestExtraBatchesAreExplainedOrFail: a batch in the ledger (or the
// trusted topic) that nobody acknowledged is explained by an outcome
// unknown or an uncounted 200 of one of its attempts, and otherwise (its
// every attempt refused, or no attempt at all) counts as unexplained,
// which fails the ledger check; an explained one there twice counts as
// duplicated.
func TestExtraBatchesAreExplainedOrFail(t *testing.T) {
	t.Parallel()
	history := map[int32][]verify.Op{
		0: {{Lease: "shard:0", BatchID: "w0-0/1", Answer: verify.AnswerUnknown}, {Lease: "shard:0", BatchID: "w0-0/1", Answer: verify.AnswerRefused},
			{Lease: "shard:2", BatchID: "w2-0/4", Answer: verify.AnswerUnknown}},
		1: {{Lease: "shard:1", BatchID: "w1-0/stale-3", Answer: verify.AnswerCommitted, Offsets: []int64{9}},
			{Lease: "shard:1", BatchID: "w1-0/2", Answer: verify.AnswerRefused}},
	}
	found := map[string][2]int64{
		"shard:0|w0-0|w0-0/0":       {2, 2}, // acknowledged
		"shard:0|w0-0|w0-0/1":       {2, 2}, // outcome unknown, landed
		"shard:1|w1-0|w1-0/stale-3": {2, 2}, // a frozen worker's 200
		"shard:1|w1-0|w1-0/2":       {2, 2}, // refused, yet there
		"shard:1|w1-0|w1-0/9":       {2, 2}, // never sent
		"shard:2|w2-0|w2-0/4":       {4, 2}, // outcome unknown, landed twice
	}
	var c report.LedgerCheck
	judgeExtra(&c, found, map[string]bool{"shard:0|w0-0|w0-0/0": true}, extraReasons(history))
	c.Finish()
	switch {
	case c.Extra != 5 || c.Unexplained != 2 || c.Duplicated != 1:
		t.Fatalf("extra %d, unexplained %d, duplicated %d; want 5, 2 and 1", c.Extra, c.Unexplained, c.Duplicated)
	case c.ExtraBecause[extraUnknown] != 2 || c.ExtraBecause[extraCommitted] != 1:
		t.Fatalf("explained by %v, want two outcomes unknown and one uncounted 200", c.ExtraBecause)
	case c.Pass:
		t.Fatal("the ledger check passed with two extra batches nothing explains")
	}
}
