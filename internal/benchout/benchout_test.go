package benchout

import (
	"math"
	"testing"
)

func TestSaveLoadRoundTrip(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	Save(t, "x", "| a |\n", Figures{"json_p50_local_us": 53.2, "up_moved_min": 22097})
	md, figs, err := Load(dir, "x")
	if err != nil || md != "| a |\n" || figs["up_moved_min"] != 22097 || figs["json_p50_local_us"] != 53.2 {
		t.Fatalf("%q %v %v", md, figs, err)
	}
	if _, _, err := Load(dir, "missing"); err == nil {
		t.Fatal("a test that saved nothing loads")
	}
}

// A NaN or Inf figure (a ratio over a zero) cannot be marshalled: Save
// fails the test, so the report stops rather than showing it.
func TestSaveInfFails(t *testing.T) {
	t.Setenv(EnvDir, t.TempDir())
	ft := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		Save(ft, "nan", "", Figures{"r": math.Inf(1)})
	}()
	if !ft.failed {
		t.Fatal("an Inf figure was saved")
	}
}

type fakeTB struct {
	testing.TB
	failed bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Log(...any)            {}
func (f *fakeTB) Fatalf(string, ...any) { f.failed = true; panic("fatal") }
