package gateway

import (
	"encoding/json"
	"os"
	"slices"
	"testing"
)

// answerVector is one row of api/answers.json, the answer table shared by
// the gateway's, the Go SDK's and the Python SDK's tests.
type answerVector struct {
	Code   string `json:"code"`
	Status int    `json:"status"`
}

// TestAnswerVectorsMatchTheServer: api/answers.json lists every Code of
// the gateway once, each with the status statusOf gives it, so the SDKs'
// tests that read the same file test the server's table.
func TestAnswerVectorsMatchTheServer(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("../api/answers.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Answers []answerVector `json:"answers"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, v := range doc.Answers {
		listed = append(listed, v.Code)
		if got := statusOf(Code(v.Code)); got != v.Status {
			t.Errorf("%s: the server answers %d, api/answers.json says %d", v.Code, got, v.Status)
		}
	}
	codes := declaredCodes(t)
	slices.Sort(listed)
	if !slices.Equal(codes, listed) {
		t.Errorf("api/answers.json lists %v, the server's codes are %v", listed, codes)
	}
}
