package stack

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
)

// replicaCredentialFlag is serve's flag naming the file of the secret the
// replicas share: with it, a replica that is not the holder forwards
// produce, renew and release to the holder instead of answering 421.
const replicaCredentialFlag = "replica-credential-file"

// replicaCredential writes the replicas' shared secret (32 random bytes,
// hex) to a file of the children's directory and returns its path, for
// two replicas or more; "" for one (nothing to forward to).
func (s *Stack) replicaCredential(n int) (string, error) {
	if n < 2 {
		return "", nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	path := filepath.Join(s.childDir, "replica-credential")
	if err := os.WriteFile(path, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil {
		return "", err
	}
	s.forwarding = true
	return path, nil
}

// Forwarding reports whether the replicas share a replica credential and
// forward requests to the holder (else they answer 421 with holder_url).
func (s *Stack) Forwarding() bool { return s.forwarding }
