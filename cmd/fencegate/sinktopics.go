package main

import (
	"fmt"

	"github.com/fencegate/fencegate/txnmap"
)

// checkSinkTopics refuses routes of which one's topic is a topic the
// trusted sink writes for another (T.NAME, T.NAME.receipts, T.NAME.state
// of topics): the sink's output would be read as lease records, and
// workers' records written into the sink's output (FM92).
func checkSinkTopics(routes []txnmap.Route, topics func(string) (trusted, receipts, state string)) error {
	route := map[string]string{}
	for _, r := range routes {
		route[r.Topic] = r.Pattern
	}
	for _, r := range routes {
		trusted, receipts, state := topics(r.Topic)
		for _, out := range []string{trusted, receipts, state} {
			if p, ok := route[out]; ok {
				return fmt.Errorf("config: route %q writes topic %s, which the trusted sink writes for route %q's topic %s: "+
					"rename the topic or the sink (--trusted-name)", p, out, r.Pattern, r.Topic)
			}
		}
	}
	return nil
}
