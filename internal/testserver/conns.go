package testserver

import (
	"errors"
	"net"
	"sync"
	"time"
)

// ServeConns accepts connections on ln, in a goroutine of its own, until
// ln is closed, and hands each to handle in a goroutine of its own. wg
// counts the accepting goroutine and every handle that runs, so that
// wg.Wait after closing ln returns once all have ended. An accept that
// fails otherwise (out of file descriptors, say) is tried again after
// 10 ms.
func ServeConns(ln net.Listener, wg *sync.WaitGroup, handle func(net.Conn)) {
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				handle(c)
			}()
		}
	}()
}
