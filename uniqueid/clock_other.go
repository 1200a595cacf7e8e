//go:build !(linux && amd64)

package uniqueid

import "time"

// unixNow returns the wall-clock time in whole seconds since the Unix epoch.
func unixNow() int64 {
	return time.Now().Unix()
}
