package kafkaconn

import (
	"fmt"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// AuthWatch is a franz-go hook that remembers whether the last SASL
// exchange of its client failed. A broker may end a refused login by
// closing the connection rather than answering SASL_AUTHENTICATION_FAILED
// (kfake does); the client then sees only EOF, retries, and a caller sees
// only "context deadline exceeded". Explain names the login instead.
//
// Install it with kgo.WithHooks; it is safe for concurrent use.
type AuthWatch struct {
	mu   sync.Mutex
	last error // of the last SASLHandshake or SASLAuthenticate; nil: it went through
}

var _ kgo.HookBrokerE2E = (*AuthWatch)(nil)

// OnBrokerE2E records the outcome of each SASL request.
func (w *AuthWatch) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	if key != kmsg.SASLHandshake.Int16() && key != kmsg.SASLAuthenticate.Int16() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.last = e.Err()
}

// Explain is c.Explain(err), except that an error of a client whose last
// SASL exchange failed is a refused login (ErrHandshake), naming the
// mechanism and the user (never the password).
func (w *AuthWatch) Explain(c Config, err error) error {
	if err == nil {
		return nil
	}
	w.mu.Lock()
	last := w.last
	w.mu.Unlock()
	if last == nil || !c.SASL() {
		return c.Explain(err)
	}
	return fmt.Errorf("%w: SASL %s as %q refused: the broker ended the login (%v); check the user and password (%v)",
		ErrHandshake, c.SASLMechanism, c.SASLUser, last, err)
}
