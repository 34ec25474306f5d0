package hollownode

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if _, err := c.Write([]byte(line)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return l.Addr().String()
}

func roundTrip(t *testing.T, c net.Conn, r *bufio.Reader, msg string, within time.Duration) (string, error) {
	t.Helper()
	if err := c.SetDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte(msg + "\n")); err != nil {
		return "", err
	}
	return r.ReadString('\n')
}

// A cut stops forwarding both ways without closing the connection; the
// heal delivers what waited, in order, on the same connection. A
// connection opened while cut is accepted and held until its SYN's first
// retransmission after the heal (1 s after it was opened, at the earliest).
func TestProxyPartitionHoldsWithoutClosing(t *testing.T) {
	p, err := NewProxy(echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if got, err := roundTrip(t, c, r, "one", 10*time.Second); err != nil || got != "one\n" {
		t.Fatalf("before the cut: %q, %v", got, err)
	}
	p.Cut()
	// Nothing comes back while cut: the read times out, the connection
	// stays open (a timeout, not EOF or a reset).
	_, err = roundTrip(t, c, r, "two", 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("while cut: want a read timeout, got %v", err)
	}
	opened := time.Now()
	c2, err := net.Dial("tcp", p.Addr())
	if err != nil {
		t.Fatalf("a connection opened while cut is refused: %v", err)
	}
	defer c2.Close()
	r2 := bufio.NewReader(c2)
	_, err = roundTrip(t, c2, r2, "three", 300*time.Millisecond)
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("a connection opened while cut: want a read timeout, got %v", err)
	}
	p.Heal()
	for _, w := range []struct {
		c    net.Conn
		r    *bufio.Reader
		line string
	}{{c, r, "two\n"}, {c2, r2, "three\n"}} {
		if err := w.c.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if got, err := w.r.ReadString('\n'); err != nil || got != w.line {
			t.Fatalf("after the heal: %q, %v; want the held %q", got, err, w.line)
		}
	}
	if took := time.Since(opened); took < time.Second {
		t.Errorf("the connection opened while cut got through %v after it was opened, before its SYN's first retransmission (1s)", took)
	}
	if p.IsCut() {
		t.Error("still cut after the heal")
	}
}

func TestSynRetransmit(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 3, 29, 0, 0, time.UTC)
	for _, tc := range []struct {
		healed, want time.Duration // after the first SYN; want -1: timed out
	}{{0, time.Second}, {time.Second, time.Second}, {1100 * time.Millisecond, 3 * time.Second}, {8 * time.Second, 15 * time.Second},
		{63 * time.Second, 63 * time.Second}, {64 * time.Second, -1}} {
		at, ok := synRetransmit(t0, t0.Add(tc.healed))
		if tc.want < 0 {
			if ok {
				t.Errorf("healed %v after the first SYN: got through at %v, want the connect timed out", tc.healed, at.Sub(t0))
			}
			continue
		}
		if !ok || at.Sub(t0) != tc.want {
			t.Errorf("healed %v after the first SYN: %v %v, want through %v after it", tc.healed, at.Sub(t0), ok, tc.want)
		}
	}
}
