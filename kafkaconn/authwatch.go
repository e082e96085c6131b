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
// A failed SASL request is remembered until a request that is not part
// of a login is answered: the handshake and first SCRAM step of a retried
// login are answered too, and a deadline that ends the retry there is
// still the refused login.
//
// Install it with kgo.WithHooks; it is safe for concurrent use.
type AuthWatch struct {
	mu   sync.Mutex
	last error // of the last failed SASLHandshake or SASLAuthenticate; nil: none since a request behind a login was answered
}

var _ kgo.HookBrokerE2E = (*AuthWatch)(nil)

// OnBrokerE2E records a failed SASL request, and forgets it once another
// request is answered.
func (w *AuthWatch) OnBrokerE2E(_ kgo.BrokerMetadata, key int16, e kgo.BrokerE2E) {
	sasl := key == kmsg.SASLHandshake.Int16() || key == kmsg.SASLAuthenticate.Int16()
	err := e.Err()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case sasl && err != nil:
		w.last = err
	case !sasl && err == nil:
		w.last = nil
	}
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
