package stack

import "testing"

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	ok := [][2]string{{"http://127.0.0.1:8080", "127.0.0.1:9092"}, {"http://localhost:8080", "localhost:9092,127.0.0.2:9093"}}
	for _, c := range ok {
		if err := loopbackOnly(c[0], c[1]); err != nil {
			t.Errorf("%v refused: %v", c, err)
		}
	}
	bad := [][2]string{{"http://10.0.0.1:8080", "127.0.0.1:9092"}, {"http://127.0.0.1:8080", "kafka.prod:9092"}, {"http://example.com", "127.0.0.1:9092"}}
	for _, c := range bad {
		if err := loopbackOnly(c[0], c[1]); err == nil {
			t.Errorf("%v accepted", c)
		}
	}
}
