package fakenode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"k8s.io/klog/v2"
)

// DefaultControlSocket is where `fakenodes` listens for fault commands and
// `fakenodes fault` sends them, unless --control-socket says otherwise.
func DefaultControlSocket() string {
	dir := os.Getenv("XDG_RUNTIME_DIR")
	if dir == "" {
		dir = os.TempDir()
	}
	return filepath.Join(dir, fmt.Sprintf("nodeshepherd-%d", os.Getuid()), "fakenodes.sock")
}

// privateDir creates the socket's directory owner-only, or checks that an
// existing one is: whoever can reach the socket can partition every node.
func privateDir(socket string) error {
	dir := filepath.Dir(socket)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("control socket directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("control socket directory: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("control socket directory %s is not a directory (a symlink?); pass a --control-socket in a private directory", dir)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("control socket directory %s belongs to uid %d, not to this user (%d); pass a --control-socket in a directory of your own", dir, st.Uid, os.Getuid())
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("control socket directory %s is open to other users (mode %v): anyone reaching the socket could inject faults; run chmod 700 %s or pass a --control-socket in a private directory", dir, fi.Mode().Perm(), dir)
	}
	return nil
}

type faultResponse struct {
	Nodes []string `json:"nodes,omitempty"`
	Error string   `json:"error,omitempty"`
}

// ServeControl answers fault commands on a unix socket until ctx ends. The
// socket is local and owner-only, in an owner-only directory: it is how a
// second process reaches this one.
func ServeControl(ctx context.Context, m *Manager, socket string) error {
	if err := privateDir(socket); err != nil {
		return err
	}
	if c, err := net.Dial("unix", socket); err == nil {
		c.Close()
		return fmt.Errorf("another fakenodes process already listens on %s; stop it or pass a different --control-socket", socket)
	}
	_ = os.Remove(socket) // a stale socket from a process that died
	l, err := net.Listen("unix", socket)
	if err != nil {
		return fmt.Errorf("listening on control socket: %w", err)
	}
	_ = os.Chmod(socket, 0o600)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/faults", func(w http.ResponseWriter, r *http.Request) {
		var f Fault
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&f); err != nil {
			writeJSON(w, http.StatusBadRequest, faultResponse{Error: "malformed fault: " + err.Error()})
			return
		}
		nodes, err := m.Apply(klog.NewContext(context.Background(), klog.FromContext(ctx)), f)
		var fe *FaultError
		switch {
		case errors.As(err, &fe):
			writeJSON(w, http.StatusBadRequest, faultResponse{Error: err.Error()})
		case err != nil:
			writeJSON(w, http.StatusInternalServerError, faultResponse{Error: err.Error()})
		default:
			writeJSON(w, http.StatusOK, faultResponse{Nodes: nodes})
		}
	})
	mux.HandleFunc("GET /v1/nodes", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, m.States())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = srv.Close()
		_ = os.Remove(socket)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// ControlClient talks to a running fakenodes process.
type ControlClient struct {
	socket string
	http   *http.Client
}

// NewControlClient returns a client for the process listening on socket.
func NewControlClient(socket string) *ControlClient {
	return &ControlClient{socket: socket, http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}},
	}}
}

func (c *ControlClient) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://fakenodes"+path, rd)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the fakenodes process at %s (is `nodeshepherd fakenodes` running with this --control-socket?): %w", c.socket, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var fr faultResponse
		_ = json.NewDecoder(resp.Body).Decode(&fr)
		if resp.StatusCode == http.StatusBadRequest {
			return &FaultError{Err: errors.New(fr.Error)}
		}
		return fmt.Errorf("fakenodes process: %s: %s", resp.Status, fr.Error)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// Apply sends a fault; the result is the nodes it reached.
func (c *ControlClient) Apply(ctx context.Context, f Fault) ([]string, error) {
	var fr faultResponse
	if err := c.do(ctx, http.MethodPost, "/v1/faults", f, &fr); err != nil {
		return nil, err
	}
	return fr.Nodes, nil
}

// States returns the nodes' fault states.
func (c *ControlClient) States(ctx context.Context) ([]NodeState, error) {
	var out []NodeState
	err := c.do(ctx, http.MethodGet, "/v1/nodes", nil, &out)
	return out, err
}
