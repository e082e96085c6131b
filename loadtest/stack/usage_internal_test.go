package stack

import (
	"testing"
	"time"
)

// TestCPUBetweenTakesTheNearestSamples: the CPU of a window inside a phase
// is the difference between the samples nearest to its ends, over the
// seconds between those samples; a window inside one sample period has no
// figure rather than a zero.
func TestCPUBetweenTakesTheNearestSamples(t *testing.T) {
	t.Parallel()
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	u := &Usage{Series: []CPUSample{
		{At: at(0), CPU: map[string]float64{}},
		{At: at(250), CPU: map[string]float64{"gateway-0": 0.1}},
		{At: at(500), CPU: map[string]float64{"gateway-0": 0.3, "broker": 0.1}},
		{At: at(750), CPU: map[string]float64{"gateway-0": 0.6, "broker": 0.2}},
	}}
	cpu, secs := u.CPUBetween(at(240), at(760))
	if secs != 0.5 || cpu["gateway-0"] < 0.4999 || cpu["gateway-0"] > 0.5001 || cpu["broker"] != 0.2 {
		t.Fatalf("window 240-760 ms: %v over %.2fs, want gateway-0 0.5 and broker 0.2 over 0.5s", cpu, secs)
	}
	if cpu, secs := u.CPUBetween(at(480), at(520)); cpu != nil || secs != 0 {
		t.Fatalf("a window inside one sample period: %v over %.2fs, want none", cpu, secs)
	}
}
