package procstat

import (
	"errors"
	"os"
	"testing"
)

func TestResident(t *testing.T) {
	self, err := Resident(0)
	if errors.Is(err, ErrNoProc) {
		t.Skip(err)
	}
	if err != nil || self <= 0 {
		t.Fatalf("Resident(0) = %d, %v", self, err)
	}
	if byPID, err := Resident(os.Getpid()); err != nil || byPID <= 0 {
		t.Errorf("Resident(own pid) = %d, %v", byPID, err)
	}
	if _, err := Resident(1 << 30); err == nil {
		t.Error("no error for a process that does not exist")
	}
}
