package router

import (
	"testing"
	"time"
)

// A request waiting for the view wakes at the change that satisfies it,
// not at a poll or its deadline (a minute here), and gives up at the
// deadline when no change does.
func TestViewsAwait(t *testing.T) {
	var vs views
	has := func(name string) func(*view) bool {
		return func(v *view) bool { return v != nil && v.addrs[name] != "" }
	}
	vs.Swap(&view{addrs: map[string]string{"a": "127.0.0.1:1"}})
	if _, ok := vs.await(time.Minute, has("a")); !ok {
		t.Fatal("a view that already satisfies was waited for")
	}
	done := make(chan bool)
	go func() {
		_, ok := vs.await(time.Minute, has("b"))
		done <- ok
	}()
	for range 3 { // changes that do not satisfy it: it waits on
		vs.Swap(&view{addrs: map[string]string{"a": "127.0.0.1:1"}})
		vs.changed()
	}
	vs.Swap(&view{addrs: map[string]string{"a": "127.0.0.1:1", "b": "127.0.0.1:2"}})
	vs.changed()
	if ok := <-done; !ok {
		t.Fatal("the waiter did not see the view it waited for")
	}
	if v, ok := vs.await(time.Millisecond, has("c")); ok || v.addrs["b"] == "" {
		t.Fatalf("await for a view that never comes: %v, with the last view %v", ok, v.addrs)
	}
}
