// Package syncbuf is a bytes.Buffer that goroutines may write to while a
// test reads it: the sink of a logger whose lines a test looks for.
//
// It must never stand in for a log sink of the project's own commands: it
// keeps everything written to it, in memory, for as long as it lives.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write and String.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
