//go:build chaos && !linux

package chaos

import "syscall"

func sysProcAttr() *syscall.SysProcAttr { return nil }
