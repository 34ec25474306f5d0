package nodelifecycle

import (
	"testing"
	"time"
)

func TestContactBlindSpell(t *testing.T) {
	c := newContact(t0, 3*time.Second, 50*time.Second)
	if judge, reset := c.check(t0.Add(time.Second)); !judge || reset {
		t.Fatal("fresh controller must judge without reset")
	}
	if judge, _ := c.check(t0.Add(10 * time.Second)); judge {
		t.Fatal("no answer for 10s: must not judge")
	}
	if out := c.answered(t0.Add(60 * time.Second)); out != 60*time.Second {
		t.Fatalf("outage %v", out)
	}
	// Answering again is not enough: the lease watch must deliver first.
	if judge, _ := c.check(t0.Add(61 * time.Second)); judge {
		t.Fatal("judged before the lease watch delivered anything")
	}
	c.sawLease()
	if judge, reset := c.check(t0.Add(62 * time.Second)); !judge || !reset {
		t.Fatal("after a lease event: judge with a reset")
	}
	if judge, reset := c.check(t0.Add(62 * time.Second)); !judge || reset {
		t.Fatal("reset only once")
	}
}

// Without any lease event (a cluster without Leases) the controller judges
// again after two minutes, longer than any reflector backoff.
func TestContactGivesUpWaitingEventually(t *testing.T) {
	c := newContact(t0, 3*time.Second, 50*time.Second)
	c.answered(t0.Add(10 * time.Second))
	c.answered(t0.Add(40 * time.Second)) // answered every second from here on
	for s := 41; s <= 160; s++ {
		c.answered(t0.Add(time.Duration(s) * time.Second))
		if judge, _ := c.check(t0.Add(time.Duration(s) * time.Second)); judge {
			t.Fatalf("judged at %ds without a lease event, before two minutes ran out", s)
		}
	}
	c.answered(t0.Add(161 * time.Second))
	if judge, reset := c.check(t0.Add(161 * time.Second)); !judge || !reset {
		t.Fatal("after two minutes without lease events: judge with a reset")
	}
}
