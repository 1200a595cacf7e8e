package testserver

import (
	"errors"
	"sync"
)

// Locked returns what f returns, called with mu held: a test server's
// getter, or its call that changes the server's state, is then
// "return Locked(&s.mu, s.startLocked)" or
// "return Locked(&s.mu, func() int { return s.proc.PID() })".
func Locked[T any](mu *sync.Mutex, f func() T) T {
	mu.Lock()
	defer mu.Unlock()
	return f()
}

// StartRefused returns why a test server may not start: an error of text
// ifClosed if it is closed, of text ifRunning if it runs; nil if it may.
func StartRefused(closed, running bool, ifClosed, ifRunning string) error {
	switch {
	case closed:
		return errors.New(ifClosed)
	case running:
		return errors.New(ifRunning)
	}
	return nil
}
