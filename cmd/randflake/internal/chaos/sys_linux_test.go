//go:build chaos && linux

package chaos

import "syscall"

// sysProcAttr makes the kernel kill a child when the test process dies, so
// a test killed by its timeout leaves no etcd or serve process behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
