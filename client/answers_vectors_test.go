package client

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"slices"
	"testing"
)

// TestAnswerVectors: the SDK's reaction table and ProduceOutcome say for
// every code what api/answers.json says (the file the gateway's table
// test and the Python SDK's tests read too), and the file lists every
// code of the SDK.
func TestAnswerVectors(t *testing.T) {
	raw, err := os.ReadFile("../api/answers.json")
	if errors.Is(err, fs.ErrNotExist) {
		t.Skip("api/answers.json is not next to this module (not a checkout of the repository)")
	}
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Answers []struct {
			Code           string `json:"code"`
			Status         int    `json:"status"`
			Reaction       string `json:"reaction"`
			Retryable      bool   `json:"retryable"`
			ProduceOutcome string `json:"produce_outcome"`
		} `json:"answers"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	names := map[reaction]string{refuse: "refuse", lost: "lost", regenerate: "regenerate", follow: "follow", retry: "retry", held: "held"}
	outcomes := map[Outcome]string{OutcomeCommitted: "committed", OutcomeRefused: "refused", OutcomeUnknown: "unknown"}
	var listed []string
	for _, v := range doc.Answers {
		listed = append(listed, v.Code)
		p := &Problem{Status: v.Status, Code: v.Code, HolderURL: "http://gw-2:8080"}
		r := reactionTo(p)
		if names[r] != v.Reaction {
			t.Errorf("%s: the SDK's reaction is %s, api/answers.json says %s", v.Code, names[r], v.Reaction)
		}
		if again := r == retry || r == follow || r == regenerate; again != v.Retryable {
			t.Errorf("%s: the SDK retries it: %v, api/answers.json says %v", v.Code, again, v.Retryable)
		}
		if o := outcomes[ProduceOutcome(v.Status, v.Code)]; o != v.ProduceOutcome {
			t.Errorf("%s: ProduceOutcome says %s, api/answers.json says %s", v.Code, o, v.ProduceOutcome)
		}
	}
	slices.Sort(listed)
	if codes := slices.Sorted(func(yield func(string) bool) {
		for c := range reactions {
			if !yield(c) {
				return
			}
		}
	}); !slices.Equal(codes, listed) {
		t.Errorf("api/answers.json lists %v, the SDK knows %v", listed, codes)
	}
}
