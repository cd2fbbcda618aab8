// Package procstat reads what Linux's /proc and getrusage say of a process,
// for the benchmarks and reports that measure memory and CPU. It knows
// nothing of ringgate.
package procstat

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// ErrNoProc is returned where /proc is not there to read.
var ErrNoProc = errors.New("procstat: no /proc")

// Resident is a process's resident memory in bytes (VmRSS); pid 0 is this
// process.
func Resident(pid int) (int64, error) {
	path := "/proc/self/status"
	if pid != 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return 0, fmt.Errorf("%s: %w", path, ErrNoProc)
		}
		return 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: VmRSS %q: %w", path, rest, err)
			}
			return kb << 10, nil
		}
	}
	if err := s.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return 0, fmt.Errorf("%s: no VmRSS line", path)
}

// CPU is the CPU time (user and system) this process has used; 0 where
// getrusage fails.
func CPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
