package hollownode

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// Proxy forwards one hollow node's TCP connections to the API server and
// can partition it: while cut, no byte is forwarded either way and no
// connection is closed or refused, as a network partition looks to both
// ends; a heal lets everything through again, in order. A connection
// opened while cut is accepted (the loopback handshake cannot be dropped)
// but held, after the heal too, until the moment its SYN would have been
// retransmitted (synRetransmit): a real partition drops the SYN and the
// client's kernel sends it again 1, 3, 7, ... s later. TLS passes through
// untouched: the kubelet talks to the API server end to end.
type Proxy struct {
	l      net.Listener
	target string

	mu     sync.Mutex
	open   *sync.Cond // signalled on a heal or on Close
	cut    bool
	closed bool
	conns  map[net.Conn]bool
	done   chan struct{} // closed by Close
}

// synRetransmits are when Linux sends a connection's SYN again after the
// first (a 1 s initial RTO, doubled each time, tcp_syn_retries 6); after
// the last the connect fails.
var synRetransmits = []time.Duration{1 * time.Second, 3 * time.Second, 7 * time.Second, 15 * time.Second, 31 * time.Second, 63 * time.Second}

// synRetransmit is when a connection whose first SYN was sent at opened
// gets through a network that forwards again from healed: its first SYN
// retransmission at or after healed (false: none, the connect timed out).
func synRetransmit(opened, healed time.Time) (time.Time, bool) {
	for _, d := range synRetransmits {
		if at := opened.Add(d); !at.Before(healed) {
			return at, true
		}
	}
	return time.Time{}, false
}

// NewProxy listens on a free loopback port and forwards to target
// (host:port).
func NewProxy(target string) (*Proxy, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{l: l, target: target, conns: map[net.Conn]bool{}, done: make(chan struct{})}
	p.open = sync.NewCond(&p.mu)
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.l.Addr().String() }

// Cut partitions the node: forwarding stops both ways.
func (p *Proxy) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
}

// Heal ends the partition.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
	p.open.Broadcast()
}

// IsCut says whether the node is partitioned.
func (p *Proxy) IsCut() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cut
}

// Close stops listening and closes every connection.
func (p *Proxy) Close() {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	p.open.Broadcast()
	_ = p.l.Close()
	for c := range conns {
		_ = c.Close()
	}
}

// pass blocks while the node is cut; false once the proxy is closed.
func (p *Proxy) pass() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.cut && !p.closed {
		p.open.Wait()
	}
	return !p.closed
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = true
	return true
}

func (p *Proxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	_ = c.Close()
}

func (p *Proxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *Proxy) handle(client net.Conn) {
	if !p.track(client) {
		return
	}
	defer p.untrack(client)
	// A connection opened during a partition waits for the heal and then
	// for its SYN's next retransmission: the first would not have reached
	// the server. A cut again in the meantime starts the wait over.
	opened, wasCut := time.Now(), p.IsCut()
	for {
		if !p.pass() {
			return
		}
		if !wasCut {
			break
		}
		at, ok := synRetransmit(opened, time.Now())
		if !ok {
			return // the client's connect has timed out
		}
		t := time.NewTimer(time.Until(at))
		select {
		case <-t.C:
		case <-p.done:
			t.Stop()
			return
		}
		if !p.IsCut() {
			break
		}
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	if !p.track(server) {
		return
	}
	defer p.untrack(server)
	done := make(chan struct{}, 2)
	go func() { p.pump(server, client); done <- struct{}{} }()
	go func() { p.pump(client, server); done <- struct{}{} }()
	<-done
	<-done
}

// pump copies src to dst, holding every write (and the close that ends
// the stream) while the node is cut.
func (p *Proxy) pump(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.pass() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				_ = src.Close()
				return
			}
		}
		if err != nil {
			if p.pass() && errors.Is(err, io.EOF) {
				if tc, ok := dst.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
					return
				}
			}
			_ = dst.Close()
			return
		}
	}
}
