//go:build unix

package fakeupstream

import (
	"io"
	"os"
	"syscall"
	"testing"
)

func TestMainStopsOnSignal(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(sig.String(), func(t *testing.T) {
			// Main registers its signal handler before it prints the address,
			// so the signal cannot kill the test binary.
			addr, done := runCLI(t, func(w io.Writer) error {
				return Main([]string{"-listen", "127.0.0.1:0"}, w)
			})
			if r := post(t, "http://"+addr+"/v1/embeddings", `{"input":"x"}`); r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if err := syscall.Kill(os.Getpid(), sig); err != nil {
				t.Fatal(err)
			}
			wait(t, done)
		})
	}
}
