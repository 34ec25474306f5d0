package framework

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// FaultProxy is an HTTPS reverse proxy in front of kube-apiserver that
// injects API faults into chosen classes of requests: 429 with Retry-After,
// 500, writes that hang past the client's patience (after reaching the API
// server or not), watches dropped mid-stream, and 410 Gone (Expired) for
// watches and lists that resume from a resourceVersion. It terminates TLS
// with its own self-signed certificate (RESTConfig trusts it) and forwards
// every request, credentials included, to the API server over TLS trusting
// the cluster CA. Only the client given its RESTConfig goes through it:
// fake nodes and the test's own checks talk to the API server directly.
// Every request is logged, with what was injected and whether it reached
// the API server, so that tests can count the writes that took effect.
type FaultProxy struct {
	t      testing.TB
	srv    *httptest.Server
	target *url.URL
	rp     *httputil.ReverseProxy
	caPEM  []byte
	closed chan struct{}

	mu    sync.Mutex
	rules []*FaultRule
	log   []ProxiedRequest
	// watches cancel the watches being forwarded, for DropWatches.
	watches map[*http.Request]context.CancelFunc
	// unlogged counts the requests (not watches) being served and not yet
	// logged, for SettledLog.
	unlogged int
	// held counts, by rule name, the requests FaultHold holds now.
	held map[string]int
}

// FaultKind is what a FaultRule does to the requests it matches.
type FaultKind string

const (
	// FaultStatus answers with Status (429 or 5xx) and a metav1.Status body,
	// with a Retry-After header when RetryAfter is set; nothing is forwarded.
	FaultStatus FaultKind = "status"
	// FaultHang forwards the request (so a write takes effect) and then
	// withholds the answer until the client gives up: the client cannot
	// tell whether its write happened.
	FaultHang FaultKind = "hang"
	// FaultHangUnsent withholds the request itself until the client gives up.
	FaultHangUnsent FaultKind = "hang-unsent"
	// FaultDropWatch forwards a watch and cuts the connection After into it.
	FaultDropWatch FaultKind = "drop-watch"
	// FaultGone answers 410 Gone, reason Expired ("too old resource
	// version"), as after an etcd compaction.
	FaultGone FaultKind = "gone"
	// FaultBefore runs Before (the test changes the cluster meanwhile) and
	// then forwards the request unchanged: a race lost at a chosen moment.
	FaultBefore FaultKind = "before"
	// FaultStall forwards a watch and passes its status and headers but
	// none of its events (bookmarks included): the watch stays open and
	// silent while the API server answers everything else, until the API
	// server ends it or DropWatches cuts it.
	FaultStall FaultKind = "stall"
	// FaultLostAnswer forwards the request (a write takes effect) and then
	// aborts the client's stream or connection instead of relaying the
	// answer: the client sees an error at once and cannot tell whether its
	// write happened (FaultHang's case, without waiting for its timeout).
	FaultLostAnswer FaultKind = "lost-answer"
	// FaultLag forwards a watch and relays its events After late, in
	// order: the client's cache trails the API server by After (a slow
	// network, a loaded API server), while every other request is
	// answered at once. Watches it lags stay lagged until their end or
	// DropWatches. Matching a list, it relays the answer After late: the
	// list as it was when served.
	FaultLag FaultKind = "lag"
	// FaultLateLanding aborts the client's stream at once, as
	// FaultLostAnswer does, and forwards the request After later whatever
	// became of its client: a write whose answer is lost lands after the
	// client has seen the error and read again (one queued in a loaded
	// API server or etcd), within the client's own timeout.
	FaultLateLanding FaultKind = "late-landing"
	// FaultHold holds the request until Release of its rule (or Clear),
	// then forwards it whatever became of its client meanwhile (gone: its
	// answer is thrown away): a write sent before its process died that
	// lands late, as one queued in the network or the API server does.
	FaultHold FaultKind = "hold"
)

// FaultRule injects Kind into the requests it matches: every Every-th match
// (1 when zero), at most Times times (no limit when zero). Matching: Methods
// (any when empty), Resource ("pods", "nodes", "leases"; any when empty),
// Subresource ("eviction", "status"; "-" for none; any when empty), Watch
// (only watches), ResumeOnly (only watches and lists that carry a
// resourceVersion other than "" and "0": re-watches and re-lists).
type FaultRule struct {
	Name        string
	Methods     []string
	Resource    string
	Subresource string
	Watch       bool
	ResumeOnly  bool
	// QuorumRead: only reads (GETs of one object or a list, not watches)
	// with resourceVersion "": the quorum reads a controller makes to check
	// its cache, not an informer's list from the watch cache ("0").
	QuorumRead bool
	// ListOnly: only GETs of a collection (a list), not of one object nor
	// watches.
	ListOnly bool
	// Namespace: only requests in this namespace (any when empty).
	Namespace string
	// Names: only requests of these objects (any when empty).
	Names []string
	// ListsToo: with Names, lists of the resource (GETs of the collection)
	// match too: a fault on every fresh LIST and on the GETs of some objects
	// only, the others' GETs answered.
	ListsToo   bool
	Kind       FaultKind
	Status     int
	RetryAfter int           // seconds, for FaultStatus
	After      time.Duration // for FaultDropWatch
	Before     func()        // for FaultBefore
	Every      int
	Times      int

	matched, injected int
	stopped           bool
	// release ends FaultHold's hold (closed by Release or Clear, under
	// the proxy's lock).
	release  chan struct{}
	released bool
}

// releaseHeld lets the requests FaultHold holds go on; idempotent. The
// proxy's lock is held.
func (fr *FaultRule) releaseHeld() {
	if !fr.released && fr.release != nil {
		fr.released = true
		close(fr.release)
	}
}

// Writes are the mutating methods, for FaultRule.Methods.
var Writes = []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// ProxiedRequest is one request through the proxy.
type ProxiedRequest struct {
	At       time.Time
	Method   string
	Path     string // without the query
	Watch    bool
	Fault    string // the rule's name (its kind when unnamed), "" when none
	Reached  bool   // forwarded to the API server
	Status   int    // the API server's answer; 0 when none came back
	Resource string
	Sub      string
	Name     string // the object's name, "" for collections
}

// StartFaultProxy starts a proxy to the control plane behind cfg (an admin
// configuration: its CA is trusted for the upstream connection) until the
// test ends.
func StartFaultProxy(t testing.TB, cfg *rest.Config) *FaultProxy {
	t.Helper()
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(cfg.CAData) {
		t.Fatal("fault proxy: no CA in the control plane's configuration")
	}
	p := &FaultProxy{t: t, target: target, closed: make(chan struct{}), watches: map[*http.Request]context.CancelFunc{}, held: map[string]int{}}
	upstream := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true, MaxIdleConnsPerHost: 100}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport:     upstream,
		FlushInterval: -1, // watches stream event by event
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			w.WriteHeader(http.StatusBadGateway)
		},
	}
	p.srv = httptest.NewUnstartedServer(http.HandlerFunc(p.serve))
	p.srv.EnableHTTP2 = true
	p.srv.StartTLS()
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.srv.Certificate().Raw})
	t.Cleanup(func() {
		close(p.closed)
		p.srv.CloseClientConnections()
		p.srv.Close()
		upstream.CloseIdleConnections()
	})
	return p
}

// URL is the proxy's https URL.
func (p *FaultProxy) URL() string { return p.srv.URL }

// RESTConfig returns cfg (its credentials) aimed at the proxy, trusting the
// proxy's certificate.
func (p *FaultProxy) RESTConfig(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Host = p.srv.URL
	c.TLSClientConfig = rest.TLSClientConfig{CAData: p.caPEM}
	return c
}

// Inject adds a rule; rules are tried in the order added, the first that
// matches and fires wins.
func (p *FaultProxy) Inject(r FaultRule) *FaultRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Name == "" {
		r.Name = string(r.Kind)
	}
	r.release = make(chan struct{})
	p.rules = append(p.rules, &r)
	return &r
}

// Clear stops every rule: requests pass untouched from now on, and
// Injected still tells how often each fired.
func (p *FaultProxy) Clear() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, r := range p.rules {
		r.stopped = true
		r.releaseHeld()
	}
}

// Release stops a FaultHold rule and forwards the requests it holds, each
// from its own handler, at once: they land now, late.
func (p *FaultProxy) Release(r *FaultRule) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r.stopped = true
	r.releaseHeld()
}

// Held says how many requests the named rule holds now (FaultHold).
func (p *FaultProxy) Held(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.held[name]
}

// Injected says how often the named rule fired so far.
func (p *FaultProxy) Injected(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, r := range p.rules {
		if r.Name == name {
			n += r.injected
		}
	}
	return n
}

// DropWatches cuts every watch forwarded now, as a broken connection or an
// API server restart would: the clients watch again from where they were,
// which FaultGone rules may answer.
func (p *FaultProxy) DropWatches() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cancel := range p.watches {
		cancel()
	}
	return len(p.watches)
}

// Log returns a copy of the requests so far.
func (p *FaultProxy) Log() []ProxiedRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]ProxiedRequest(nil), p.log...)
}

// Count returns how many logged requests satisfy keep.
func (p *FaultProxy) Count(keep func(ProxiedRequest) bool) int {
	n := 0
	for _, e := range p.Log() {
		if keep(e) {
			n++
		}
	}
	return n
}

// requestInfo splits an API path into resource, subresource and name:
// /api/v1/namespaces/NS/pods/NAME/eviction, /apis/G/V/nodes/NAME, ...
func requestInfo(path string) (resource, sub, name string) {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "", "", ""
	}
	if len(parts) > 0 && parts[0] == "watch" {
		parts = parts[1:]
	}
	if len(parts) >= 2 && parts[0] == "namespaces" && len(parts) != 2 {
		parts = parts[2:]
	}
	if len(parts) > 0 {
		resource = parts[0]
	}
	if len(parts) > 1 {
		name = parts[1]
	}
	if len(parts) > 2 {
		sub = parts[2]
	}
	return resource, sub, name
}

func isWatch(r *http.Request) bool {
	w := r.URL.Query().Get("watch")
	return w == "true" || w == "1" || strings.Contains(r.URL.Path, "/watch/")
}

func (fr *FaultRule) matches(r *http.Request, resource, sub string, watch bool) bool {
	if len(fr.Methods) > 0 && !containsString(fr.Methods, r.Method) {
		return false
	}
	if fr.Resource != "" && fr.Resource != resource {
		return false
	}
	switch {
	case fr.Subresource == "-" && sub != "":
		return false
	case fr.Subresource != "" && fr.Subresource != "-" && fr.Subresource != sub:
		return false
	}
	if fr.Watch && !watch {
		return false
	}
	if fr.QuorumRead && (r.Method != http.MethodGet || watch || r.URL.Query().Get("resourceVersion") != "") {
		return false
	}
	if fr.ListOnly {
		if _, _, name := requestInfo(r.URL.Path); r.Method != http.MethodGet || watch || name != "" {
			return false
		}
	}
	if fr.Namespace != "" && !strings.Contains(r.URL.Path, "/namespaces/"+fr.Namespace+"/") {
		return false
	}
	if len(fr.Names) > 0 {
		_, _, name := requestInfo(r.URL.Path)
		list := fr.ListsToo && name == "" && r.Method == http.MethodGet && !watch
		if !containsString(fr.Names, name) && !list {
			return false
		}
	}
	if fr.ResumeOnly {
		rv := r.URL.Query().Get("resourceVersion")
		if r.Method != http.MethodGet || rv == "" || rv == "0" {
			return false
		}
	}
	return true
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// pick returns the rule that fires for the request, if any, and logs it.
func (p *FaultProxy) pick(r *http.Request, e *ProxiedRequest) *FaultRule {
	p.mu.Lock()
	defer p.mu.Unlock()
	var fired *FaultRule
	for _, fr := range p.rules {
		if fr.stopped || !fr.matches(r, e.Resource, e.Sub, e.Watch) {
			continue
		}
		fr.matched++
		every := max(fr.Every, 1)
		if fr.matched%every != 0 || (fr.Times > 0 && fr.injected >= fr.Times) {
			continue
		}
		fr.injected++
		fired = fr
		break
	}
	if fired != nil {
		e.Fault = fired.Name
	}
	return fired
}

func (p *FaultProxy) record(e ProxiedRequest) {
	p.mu.Lock()
	p.log = append(p.log, e)
	if !e.Watch {
		p.unlogged--
	}
	p.mu.Unlock()
}

// SettledLog is Log once every request that is not a watch has been
// logged: a write takes effect in the API server before the proxy has
// relayed its answer and logged it, so a test that saw the effect and
// counts the writes at once could miss the last one. It gives up waiting
// after 30 s (requests are logged before they hang).
func (p *FaultProxy) SettledLog() []ProxiedRequest {
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		n := p.unlogged
		p.mu.Unlock()
		if n == 0 || time.Now().After(deadline) {
			return p.Log()
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// statusRecorder keeps the status code the API server answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// stallWriter passes a watch's status and headers to the client (flushed,
// so the client sees its watch open) and drops its body: the events.
type stallWriter struct{ statusRecorder }

func (s *stallWriter) WriteHeader(code int) {
	s.statusRecorder.WriteHeader(code)
	s.Flush()
}

func (s *stallWriter) Write(b []byte) (int, error) { return len(b), nil }

// discard is a ResponseWriter for a forwarded request whose answer the
// client never gets.
type discard struct {
	h      http.Header
	status int
}

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = http.Header{}
	}
	return d.h
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(code int) {
	if d.status == 0 {
		d.status = code
	}
}

func (p *FaultProxy) serve(w http.ResponseWriter, r *http.Request) {
	res, sub, name := requestInfo(r.URL.Path)
	e := ProxiedRequest{At: time.Now(), Method: r.Method, Path: r.URL.Path, Watch: isWatch(r), Resource: res, Sub: sub, Name: name}
	fr := p.pick(r, &e)
	if !e.Watch {
		p.mu.Lock()
		p.unlogged++ // until record
		p.mu.Unlock()
	}
	if e.Watch {
		// Every watch can be cut by DropWatches.
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		p.mu.Lock()
		p.watches[r] = cancel
		p.mu.Unlock()
		defer func() { p.mu.Lock(); delete(p.watches, r); p.mu.Unlock() }()
		r = r.WithContext(ctx)
	}
	if fr == nil {
		rec := &statusRecorder{ResponseWriter: w}
		e.Reached = true
		defer func() { e.Status = rec.status; p.record(e) }()
		p.rp.ServeHTTP(rec, r)
		return
	}
	switch fr.Kind {
	case FaultStatus, FaultGone:
		p.record(e)
		code, reason, msg := fr.Status, metav1.StatusReasonUnknown, "injected by the test's fault proxy"
		switch {
		case fr.Kind == FaultGone:
			code, reason, msg = http.StatusGone, metav1.StatusReasonExpired, "too old resource version: injected by the test's fault proxy"
		case code == http.StatusTooManyRequests:
			reason, msg = metav1.StatusReasonTooManyRequests, "Too many requests, please try again later (injected by the test's fault proxy)"
		case code >= 500:
			reason = metav1.StatusReasonInternalError
		}
		st := metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
			Code: int32(code), Reason: reason, Message: msg}
		if fr.RetryAfter > 0 {
			st.Details = &metav1.StatusDetails{RetryAfterSeconds: int32(fr.RetryAfter)}
			w.Header().Set("Retry-After", strconv.Itoa(fr.RetryAfter))
		}
		body, _ := json.Marshal(st)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write(body)
	case FaultHang:
		// The write reaches the API server; its answer is thrown away.
		d := &discard{}
		e.Reached = true
		p.rp.ServeHTTP(d, r.WithContext(context.WithoutCancel(r.Context())))
		e.Status = d.status
		p.record(e)
		p.hang(r)
	case FaultHangUnsent:
		p.record(e)
		p.hang(r)
	case FaultLostAnswer:
		d := &discard{}
		e.Reached = true
		p.rp.ServeHTTP(d, r.WithContext(context.WithoutCancel(r.Context())))
		e.Status = d.status
		p.record(e)
		// net/http resets the HTTP/2 stream (or closes the HTTP/1
		// connection) without a word: the answer is lost on the way.
		panic(http.ErrAbortHandler)
	case FaultLateLanding:
		// The body is read now: the aborted handler's request is gone.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			p.record(e)
			panic(http.ErrAbortHandler)
		}
		late := r.Clone(context.WithoutCancel(r.Context()))
		late.Body, late.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		go func() {
			t := time.NewTimer(fr.After)
			defer t.Stop()
			select {
			case <-t.C:
			case <-p.closed:
				p.record(e)
				return
			}
			e.At = time.Now() // logged when it went on: when it landed
			e.Reached = true
			d := &discard{}
			p.rp.ServeHTTP(d, late)
			e.Status = d.status
			p.record(e)
		}()
		panic(http.ErrAbortHandler)
	case FaultBefore:
		fr.Before()
		rec := &statusRecorder{ResponseWriter: w}
		e.Reached = true
		defer func() { e.Status = rec.status; p.record(e) }()
		p.rp.ServeHTTP(rec, r)
	case FaultDropWatch:
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		timer := time.AfterFunc(fr.After, cancel)
		defer timer.Stop()
		rec := &statusRecorder{ResponseWriter: w}
		e.Reached = true
		defer func() { e.Status = rec.status; p.record(e) }()
		// Cancelling mid-stream makes ReverseProxy abort the response: the
		// client sees its watch cut, as when a connection breaks.
		p.rp.ServeHTTP(rec, r.WithContext(ctx))
	case FaultStall:
		sw := &stallWriter{statusRecorder{ResponseWriter: w}}
		e.Reached = true
		defer func() { e.Status = sw.status; p.record(e) }()
		p.rp.ServeHTTP(sw, r)
	case FaultLag:
		lw := newLagWriter(r.Context(), w, fr.After)
		e.Reached = true
		defer func() { e.Status = lw.status; p.record(e) }()
		p.rp.ServeHTTP(lw, r)
		lw.close()
	case FaultHold:
		p.mu.Lock()
		p.held[fr.Name]++
		p.mu.Unlock()
		select {
		case <-fr.release:
		case <-p.closed:
		}
		p.mu.Lock()
		p.held[fr.Name]--
		p.mu.Unlock()
		e.At = time.Now() // logged when it went on: when it landed
		e.Reached = true
		if r.Context().Err() != nil {
			// The client gave up (or died): the request goes on all the
			// same, as one already on its way would, and its answer is
			// thrown away.
			d := &discard{}
			p.rp.ServeHTTP(d, r.WithContext(context.WithoutCancel(r.Context())))
			e.Status = d.status
			p.record(e)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		defer func() { e.Status = rec.status; p.record(e) }()
		p.rp.ServeHTTP(rec, r)
	default:
		p.t.Errorf("fault proxy: unknown fault kind %q", fr.Kind)
		p.record(e)
		w.WriteHeader(http.StatusInternalServerError)
	}
}

// lagWriter relays a watch's status and headers at once and its body
// chunks lag late, in order, from a goroutine of its own (ReverseProxy's
// flushes are no-ops: the goroutine flushes each chunk it writes). Chunks
// are relayed as they came, whatever their framing (JSON or protobuf).
type lagWriter struct {
	statusRecorder
	lag    time.Duration
	ctx    context.Context
	chunks chan lagChunk
	done   chan struct{}
}

type lagChunk struct {
	due time.Time
	b   []byte
}

func newLagWriter(ctx context.Context, w http.ResponseWriter, lag time.Duration) *lagWriter {
	l := &lagWriter{statusRecorder: statusRecorder{ResponseWriter: w}, lag: lag, ctx: ctx,
		chunks: make(chan lagChunk, 4096), done: make(chan struct{})}
	go l.run()
	return l
}

func (l *lagWriter) WriteHeader(code int) {
	l.statusRecorder.WriteHeader(code)
	l.statusRecorder.Flush() // the client sees its watch open at once
}

// Write queues a copy of b, due lag from now.
func (l *lagWriter) Write(b []byte) (int, error) {
	select {
	case l.chunks <- lagChunk{due: time.Now().Add(l.lag), b: append([]byte(nil), b...)}:
		return len(b), nil
	case <-l.ctx.Done():
		return 0, l.ctx.Err()
	}
}

// Flush is the goroutine's: ReverseProxy's own would race with it.
func (l *lagWriter) Flush() {}

func (l *lagWriter) run() {
	defer close(l.done)
	for c := range l.chunks {
		if d := time.Until(c.due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-l.ctx.Done():
				t.Stop()
				for range l.chunks { // the client is gone: drop the rest
				}
				return
			}
		}
		if _, err := l.ResponseWriter.Write(c.b); err != nil {
			for range l.chunks {
			}
			return
		}
		l.statusRecorder.Flush()
	}
}

// close waits until every queued chunk is relayed (or dropped, the client
// gone): the handler must not return while the goroutine still writes.
func (l *lagWriter) close() {
	close(l.chunks)
	<-l.done
}

// hang blocks until the client gives up or the proxy closes.
func (p *FaultProxy) hang(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-p.closed:
	}
}

// String describes the rules and how often each fired, for failures.
func (p *FaultProxy) String() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parts []string
	for _, r := range p.rules {
		parts = append(parts, fmt.Sprintf("%s: matched %d, injected %d", r.Name, r.matched, r.injected))
	}
	return strings.Join(parts, "; ")
}
