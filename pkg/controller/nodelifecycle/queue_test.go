package nodelifecycle

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// unlimited is a queue whose limiter never runs dry, for order tests.
func unlimited() *zoneQueue {
	q := newZoneQueue(1, t0)
	q.limiter = rate.NewLimiter(rate.Inf, 1)
	return q
}

var t0 = time.Date(2015, 1, 1, 12, 0, 0, 0, time.UTC)

func drain(q *zoneQueue, now time.Time) []string {
	var got []string
	q.Try(now, func(v timedValue) (bool, time.Duration) { got = append(got, v.value); return true, 0 })
	return got
}

func TestQueueOrderAndDedup(t *testing.T) {
	q := unlimited()
	for i, n := range []string{"first", "second", "third"} {
		q.Add(n, "", t0.Add(time.Duration(i)*time.Millisecond))
	}
	if q.Add("second", "", t0) {
		t.Error("duplicate add accepted")
	}
	if got := drain(q, t0.Add(time.Second)); len(got) != 3 || got[0] != "first" || got[2] != "third" {
		t.Errorf("order %v", got)
	}
	// Processed nodes stay deduplicated until an explicit Remove.
	if q.Add("first", "", t0) {
		t.Error("re-add after processing accepted without Remove")
	}
	if !q.Remove("first") || !q.Add("first", "", t0) {
		t.Error("Remove did not re-arm the node")
	}
}

func TestQueueRemoveMiddle(t *testing.T) {
	q := unlimited()
	for _, n := range []string{"a", "b", "c"} {
		q.Add(n, "", t0)
	}
	q.Remove("b")
	if got := drain(q, t0); len(got) != 2 || got[0] == "b" || got[1] == "b" {
		t.Errorf("got %v", got)
	}
	if q.Remove("zzz") {
		t.Error("removing an unknown node reported true")
	}
}

func TestQueueRetryOrdering(t *testing.T) {
	q := unlimited()
	q.Add("first", "", t0)
	q.Add("second", "", t0.Add(time.Millisecond))
	q.Add("third", "", t0.Add(2*time.Millisecond))
	var got []string
	now := t0.Add(3 * time.Millisecond)
	q.Try(now, func(v timedValue) (bool, time.Duration) {
		got = append(got, v.value)
		if v.value == "second" && len(got) == 2 {
			return false, 0 // retried at now+1ns, after third
		}
		return true, 0
	})
	q.Try(now.Add(time.Millisecond), func(v timedValue) (bool, time.Duration) { got = append(got, v.value); return true, 0 })
	want := []string{"first", "second", "third", "second"}
	if len(got) != 4 {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestQueueRateLimit(t *testing.T) {
	q := newZoneQueue(0.1, t0)
	for _, n := range []string{"a", "b", "c"} {
		q.Add(n, "", t0)
	}
	if got := drain(q, t0); len(got) != 1 {
		t.Fatalf("burst 1: got %v", got)
	}
	if got := drain(q, t0.Add(9*time.Second)); len(got) != 0 {
		t.Errorf("token after 9s at 0.1/s: %v", got)
	}
	if got := drain(q, t0.Add(10*time.Second)); len(got) != 1 {
		t.Errorf("no token after 10s at 0.1/s: %v", got)
	}
}

func TestSwapLimiter(t *testing.T) {
	q := newZoneQueue(0.1, t0)
	q.Add("a", "", t0)
	q.Add("b", "", t0)
	drain(q, t0) // spends the token
	q.SwapLimiter(0, t0)
	if got := drain(q, t0.Add(time.Hour)); len(got) != 0 {
		t.Errorf("rate 0 tainted %v", got)
	}
	// The zero limiter had no token, so the new bucket starts empty.
	q.SwapLimiter(5.5, t0.Add(time.Hour))
	if got := drain(q, t0.Add(time.Hour)); len(got) != 0 {
		t.Errorf("swap granted a free token: %v", got)
	}
	if got := drain(q, t0.Add(time.Hour+200*time.Millisecond)); len(got) != 1 {
		t.Errorf("5.5/s gave no token after 200ms: %v", got)
	}
}
