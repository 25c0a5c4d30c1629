package live

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
)

// TestFeed: a subscriber gets the updates that follow, the newest when it
// is behind, then the last with Done and a closed channel; Lookup says
// what the page shows without script; an ended run takes no subscriber.
func TestFeed(t *testing.T) {
	t.Parallel()
	h := NewHub()
	f := h.Start("explore", "depth 1")
	if _, err := h.Subscribe("s-1"); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("subscribe before the first update: %v, want ErrNotRunning", err)
	}
	f.Publish("s-1", Update{States: 1})
	sub, err := h.Subscribe("s-1")
	if err != nil {
		t.Fatal(err)
	}
	f.Publish("s-1", Update{States: 2})
	f.Publish("s-1", Update{States: 3, Line: strings.Repeat("é", MaxText)}) // replaces 2, unread
	u := <-sub.C()
	if u.States != 3 || u.Seq != 3 || u.Kind != "explore" || len(u.Line) > MaxText || u.Done {
		t.Errorf("behind: got %+v, want the newest (3), its line cut", u)
	}
	f.End()
	f.End()
	if u, ok := <-sub.C(); !ok || !u.Done || u.States != 3 {
		t.Errorf("after End: %+v %v, want the last update with Done", u, ok)
	}
	if _, ok := <-sub.C(); ok {
		t.Error("the channel is open after Done")
	}
	sub.Close()
	sub.Close()
	r, last, found, running := h.Lookup("s-1")
	if !found || running || r.Kind != "explore" || r.Options != "depth 1" || !last.Done || last.States != 3 {
		t.Errorf("Lookup: %+v %+v %v %v", r, last, found, running)
	}
	if _, err := h.Subscribe("s-1"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("subscribe to an ended run: %v, want ErrNotRunning", err)
	}
	f.Publish("s-1", Update{States: 9})
	if _, last, _, _ := h.Lookup("s-1"); last.States != 3 {
		t.Error("an ended run took an update")
	}
}

// TestBounds: subscriptions past MaxSubscribers are refused until one
// closes; past MaxSessions the longest-ended session is forgotten; Close
// ends every subscription.
func TestBounds(t *testing.T) {
	t.Parallel()
	h := NewHub()
	f := h.Start("crash", "")
	f.Publish("s-0", Update{})
	var subs []*Sub
	for range MaxSubscribers {
		s, err := h.Subscribe("s-0")
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
	}
	if _, err := h.Subscribe("s-0"); !errors.Is(err, ErrTooMany) {
		t.Fatalf("subscriber %d: %v, want ErrTooMany", MaxSubscribers+1, err)
	}
	subs[0].Close()
	if _, err := h.Subscribe("s-0"); err != nil {
		t.Fatalf("after a close: %v", err)
	}
	g := h.Start("explore", "")
	for i := 1; i < MaxSessions; i++ {
		g.Publish(fmt.Sprint("e-", i), Update{})
	}
	g.End()
	h.Start("explore", "").Publish("new", Update{})
	if _, _, found, _ := h.Lookup("e-1"); found {
		t.Error("past MaxSessions the longest-ended session is kept")
	}
	if _, _, found, running := h.Lookup("s-0"); !found || !running {
		t.Error("a running session was forgotten")
	}
	h.Close()
	for _, s := range subs[1:] {
		if u, ok := <-s.C(); !ok || !u.Done {
			t.Fatalf("Close: %+v %v, want Done", u, ok)
		}
	}
	if _, err := h.Subscribe("new"); !errors.Is(err, ErrNotRunning) {
		t.Errorf("subscribe after Close: %v", err)
	}
}

// TestConcurrent: publishers, subscribers and closes at once (-race).
func TestConcurrent(t *testing.T) {
	t.Parallel()
	h := NewHub()
	f := h.Start("explore", "")
	f.Publish("s", Update{})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				if i%2 == 0 {
					f.Publish("s", Update{States: int64(j)})
					continue
				}
				if s, err := h.Subscribe("s"); err == nil {
					select {
					case <-s.C():
					default:
					}
					s.Close()
				}
			}
		}()
	}
	wg.Wait()
	f.End()
	var nilHub *Hub
	nilHub.Start("x", "").Publish("s", Update{})
	nilHub.Close()
}
