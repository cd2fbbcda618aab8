package redistest

import "syscall"

// sysProcAttr kills the server if the test process dies without cleanup
// (a panic or a timeout), so no redis-server outlives its test.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
