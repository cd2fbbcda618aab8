package cluster

import (
	"testing"
	"time"
)

// A request waiting for the view wakes at the change that satisfies it,
// not at a poll or its deadline (a minute here), and gives up at the
// deadline when no change does.
func TestViewsAwait(t *testing.T) {
	var vs Views
	has := func(name string) func(*Lookup) bool {
		return func(v *Lookup) bool { return v != nil && v.addrs[name] != "" }
	}
	vs.Swap(&Lookup{addrs: map[string]string{"a": "127.0.0.1:1"}})
	if _, ok := vs.Await(time.Minute, has("a")); !ok {
		t.Fatal("a view that already satisfies was waited for")
	}
	done := make(chan bool)
	go func() {
		_, ok := vs.Await(time.Minute, has("b"))
		done <- ok
	}()
	for range 3 { // changes that do not satisfy it: it waits on
		vs.Swap(&Lookup{addrs: map[string]string{"a": "127.0.0.1:1"}})
		vs.Changed()
	}
	vs.Swap(&Lookup{addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	vs.Changed()
	if ok := <-done; !ok {
		t.Fatal("the waiter did not see the view it waited for")
	}
	if v, ok := vs.Await(time.Millisecond, has("c")); ok || v.addrs["b"] == "" {
		t.Fatalf("await for a view that never comes: %v, with the last view %v", ok, v.addrs)
	}
}
