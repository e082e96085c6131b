package report

import (
	"math"
	"strings"
	"testing"
)

// TestCPUPerRecordIsLikeForLike: the gateway's CPU per record is divided
// by the stamped direct producer's (the like-for-like one), not by the
// plain one's; each producing process's CPU per record is its own phase's
// CPU over its own phase's records; and the summary prints both ratios.
func TestCPUPerRecordIsLikeForLike(t *testing.T) {
	t.Parallel()
	rep := externalRun() // 300 gateway records
	rep.Direct = DirectFigures{Records: 400, Seconds: 2}
	rep.DirectPlain = &DirectFigures{Records: 500, Seconds: 2}
	rep.Bare = &BareFigures{Producers: 2, Records: 1000, Seconds: 2}
	rep.AddPhase(ProcGateway, 3, map[string]float64{ProcGateway: 0.006, ProcBroker: 0.003}, map[string]int64{ProcGateway: 1024, ProcBroker: 1024})
	rep.AddPhase(ProcDirect, 2, map[string]float64{ProcDirect: 0.004, ProcBroker: 0.002}, map[string]int64{ProcDirect: 1024})
	rep.AddPhase(ProcDirectPlain, 2, map[string]float64{ProcDirectPlain: 0.0025}, map[string]int64{ProcDirectPlain: 1024})
	rep.AddPhase(ProcBare, 2, map[string]float64{ProcBare: 0.003}, map[string]int64{ProcBare: 1024})
	rep.Finish()
	c := rep.CPU
	want := map[string]float64{ProcGateway: 20, ProcDirect: 10, ProcDirectPlain: 5, ProcBare: 3}
	for phase, us := range want {
		if got := c.MicrosPerRecord[phase]; math.Abs(got-us) > 1e-9 {
			t.Errorf("%s: %.3f us per record, want %.3f", phase, got, us)
		}
	}
	if math.Abs(c.RatioGatewayDirect-2) > 1e-9 || math.Abs(c.RatioGatewayDirectPlain-4) > 1e-9 {
		t.Errorf("ratios: like for like %.3f (want 2), plain %.3f (want 4)", c.RatioGatewayDirect, c.RatioGatewayDirectPlain)
	}
	md := rep.Markdown()
	for _, s := range []string{"gateway 20.0 us, direct 10.0 us, direct-plain 5.0 us, bare 3.0 us",
		"gateway / direct (like for like) 2.00, gateway / direct-plain 4.00", "| broker | 0.0 (0.00) 10.0 | 0.0 (0.00) 5.0 |"} {
		if !strings.Contains(md, s) {
			t.Errorf("the summary lacks %q:\n%s", s, md)
		}
	}
}
