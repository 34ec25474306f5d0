// Package controlplane starts a real local Kubernetes control plane: etcd,
// kube-apiserver and optionally kube-controller-manager and kube-scheduler,
// built from the Go module proxy by `make controlplane`. The nodeshepherd CLI
// (`controlplane up`, `demo`, `simulate`) and the integration tests use it.
package controlplane

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

// Config says which components to start and how.
type Config struct {
	// Dir holds certificates, kubeconfigs, etcd data and component logs. When
	// empty a temporary directory is used and removed by Stop.
	Dir string
	// BinDir holds the component binaries; see FindBinDir when empty.
	BinDir string
	// ControllerManager starts kube-controller-manager with Controllers
	// (DefaultControllers when empty) and ControllerManagerArgs appended.
	ControllerManager     bool
	Controllers           string
	ControllerManagerArgs []string
	// Scheduler starts kube-scheduler with SchedulerArgs appended, and with
	// SchedulerConfig as its configuration file when that is set.
	Scheduler       bool
	SchedulerArgs   []string
	SchedulerConfig *SchedulerConfig
	// APIServerArgs are appended to kube-apiserver's arguments.
	APIServerArgs []string
	// APIServerEnv (KEY=VALUE) is added to kube-apiserver's environment,
	// for example GOMEMLIMIT for a benchmark whose API server would
	// otherwise outgrow the machine.
	APIServerEnv []string
	// ReadyTimeout bounds start-up; 60s when zero.
	ReadyTimeout time.Duration
	// ScrubOnStop removes, when a given Dir is kept, the private keys,
	// tokens, kubeconfigs and etcd's data on Stop: what is left (logs,
	// certificates, component configuration) can be shared as a report.
	ScrubOnStop bool
}

// ControlPlane is a running local control plane.
type ControlPlane struct {
	cfg        Config
	layout     layout
	removeDir  bool
	adminToken string
	procs      []*process // in start order; stopped in reverse
	// apiServerArgs are kube-apiserver's arguments, for RestartAPIServer.
	apiServerArgs []string
}

// ErrMissingBinaries is returned when a component binary is not built.
var ErrMissingBinaries = errors.New("control-plane binaries are missing")

// FindBinDir returns the directory holding the control-plane binaries:
// $NODESHEPHERD_BIN_DIR, else the directory of the running executable if it
// holds them, else bin/ in the current directory or the nearest parent that has
// one (so tests run from any package directory find the repository's bin/).
func FindBinDir() string {
	if d := os.Getenv("NODESHEPHERD_BIN_DIR"); d != "" {
		return d
	}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		if fileExists(filepath.Join(d, APIServer)) {
			return d
		}
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			if fileExists(filepath.Join(d, "bin", APIServer)) {
				return filepath.Join(d, "bin")
			}
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	return "bin"
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func (c Config) binaries() []string {
	b := []string{Etcd, APIServer}
	if c.ControllerManager {
		b = append(b, ControllerManager)
	}
	if c.Scheduler {
		b = append(b, Scheduler)
	}
	return b
}

// CheckBinaries reports missing binaries with the make target that builds them.
func CheckBinaries(binDir string, names ...string) error {
	var missing []string
	for _, n := range names {
		if _, err := exec.LookPath(filepath.Join(binDir, n)); err != nil {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in %s; build them with `make controlplane` "+
			"(or point NODESHEPHERD_BIN_DIR at a directory that has them)", ErrMissingBinaries, strings.Join(missing, ", "), binDir)
	}
	return nil
}

// Start starts the control plane and returns once kube-apiserver answers
// /readyz and the optional components answer /healthz. On error everything
// already started is stopped.
func Start(ctx context.Context, cfg Config) (_ *ControlPlane, err error) {
	logger := klog.FromContext(ctx)
	if cfg.BinDir == "" {
		cfg.BinDir = FindBinDir()
	}
	if cfg.Controllers == "" {
		cfg.Controllers = DefaultControllers
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 60 * time.Second
	}
	if err := CheckBinaries(cfg.BinDir, cfg.binaries()...); err != nil {
		return nil, err
	}
	if cfg.Scheduler && cfg.SchedulerConfig != nil {
		if err := cfg.SchedulerConfig.Validate(); err != nil {
			return nil, err
		}
	}
	cp := &ControlPlane{cfg: cfg}
	if cfg.Dir == "" {
		d, err := os.MkdirTemp("", "nodeshepherd-controlplane-")
		if err != nil {
			return nil, err
		}
		cfg.Dir, cp.removeDir = d, true
		cp.cfg.Dir = d // Dir, Stop and RestartAPIServer use it
	} else if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			cp.Stop()
		}
	}()
	for _, sub := range []string{"logs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, sub), 0o755); err != nil {
			return nil, err
		}
	}
	// From choosing the ports until every component listens on them, no
	// other control plane on this machine chooses any (see ports.go).
	unlock, err := startPortLock()
	if err != nil {
		return nil, err
	}
	var unlockOnce sync.Once
	release := func() { unlockOnce.Do(unlock) }
	defer release()
	ports, err := freePorts(5)
	if err != nil {
		return nil, err
	}
	cp.layout = layout{Dir: cfg.Dir, EtcdClientPort: ports[0], EtcdPeerPort: ports[1],
		APIServerPort: ports[2], KCMPort: ports[3], SchedulerPort: ports[4]}
	if cp.layout.PKI, err = generatePKI(cfg.Dir); err != nil {
		return nil, err
	}
	if err := cp.writeCredentials(); err != nil {
		return nil, err
	}

	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, cfg.ReadyTimeout)
	defer cancel()
	logs := filepath.Join(cfg.Dir, "logs")
	etcd, err := cp.start(Etcd, etcdArgs(cp.layout), logs)
	if err != nil {
		return nil, err
	}
	cp.apiServerArgs = append(apiServerArgs(cp.layout), cfg.APIServerArgs...)
	apiserver, err := cp.start(APIServer, cp.apiServerArgs, logs)
	if err != nil {
		return nil, err
	}
	_ = etcd
	if err := waitFor(ctx, apiserver, "kube-apiserver", cp.probe("/readyz", cp.layout.APIServerPort, true)); err != nil {
		return nil, err
	}
	logger.V(1).Info("kube-apiserver ready", "server", cp.layout.Server(), "after", time.Since(start).Round(time.Millisecond))

	var waits []func() error
	if cfg.ControllerManager {
		p, err := cp.start(ControllerManager, append(controllerManagerArgs(cp.layout, cfg.Controllers), cfg.ControllerManagerArgs...), logs)
		if err != nil {
			return nil, err
		}
		waits = append(waits, func() error {
			return waitFor(ctx, p, ControllerManager, cp.probe("/healthz", cp.layout.KCMPort, false))
		})
	}
	if cfg.Scheduler {
		args := schedulerArgs(cp.layout)
		if sc := cfg.SchedulerConfig; sc != nil {
			if err := os.WriteFile(cp.layout.path(schedulerConfigFile), []byte(schedulerConfigYAML(sc, cp.layout.path(kubeconfigScheduler))), 0o600); err != nil {
				return nil, fmt.Errorf("writing kube-scheduler's configuration: %w", err)
			}
			args = append(withoutIgnoredByConfig(args), schedulerConfigArgs(cp.layout, sc)...)
		}
		p, err := cp.start(Scheduler, append(args, cfg.SchedulerArgs...), logs)
		if err != nil {
			return nil, err
		}
		waits = append(waits, func() error {
			return waitFor(ctx, p, Scheduler, cp.probe("/healthz", cp.layout.SchedulerPort, false))
		})
	}
	for _, w := range waits {
		if err := w(); err != nil {
			return nil, err
		}
	}
	release()
	logger.Info("Local control plane ready", "server", cp.layout.Server(), "kubeconfig", cp.KubeconfigPath(),
		"controllerManager", cfg.ControllerManager, "scheduler", cfg.Scheduler, "after", time.Since(start).Round(time.Millisecond))
	return cp, nil
}

func (cp *ControlPlane) start(name string, args []string, logDir string) (*process, error) {
	var env []string
	if name == APIServer {
		env = cp.cfg.APIServerEnv
	}
	p, err := startProcess(name, filepath.Join(cp.cfg.BinDir, name), args, env, logDir)
	if err != nil {
		return nil, err
	}
	cp.procs = append(cp.procs, p)
	return p, nil
}

// probe returns a health check of a component's HTTPS endpoint.
func (cp *ControlPlane) probe(path string, port int, auth bool) func(context.Context) error {
	client := cp.httpClient()
	url := fmt.Sprintf("https://127.0.0.1:%d%s", port, path)
	return func(ctx context.Context) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer "+cp.adminToken)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s answered %s", path, resp.Status)
		}
		return nil
	}
}

// httpClient trusts the control plane's CA, for its components' endpoints.
func (cp *ControlPlane) httpClient() *http.Client {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(cp.layout.PKI.CAPEM)
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
}

func randomToken() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeCredentials writes the static token file and one kubeconfig per identity.
func (cp *ControlPlane) writeCredentials() error {
	var tokens strings.Builder
	for i, id := range identities {
		tok := randomToken()
		if id.file == kubeconfigAdmin {
			cp.adminToken = tok
		}
		tokens.WriteString(tokenLine(tok, id, 1000+i))
		if err := clientcmd.WriteToFile(*kubeconfig(cp.layout.Server(), cp.layout.PKI.CAPEM, id.user, tok), cp.layout.path(id.file)); err != nil {
			return fmt.Errorf("writing %s: %w", id.file, err)
		}
	}
	return os.WriteFile(cp.layout.path("tokens.csv"), []byte(tokens.String()), 0o600)
}

func kubeconfig(server string, ca []byte, user, token string) *clientcmdapi.Config {
	c := clientcmdapi.NewConfig()
	c.Clusters["nodeshepherd-local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	c.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	c.Contexts["nodeshepherd-local"] = &clientcmdapi.Context{Cluster: "nodeshepherd-local", AuthInfo: user}
	c.CurrentContext = "nodeshepherd-local"
	return c
}

// KubeconfigPath is the admin kubeconfig (group system:masters).
func (cp *ControlPlane) KubeconfigPath() string { return cp.layout.path(kubeconfigAdmin) }

// SchedulerKubeconfigPath is kube-scheduler's kubeconfig (user
// system:kube-scheduler, bound by the bootstrap RBAC policy and served by
// API priority and fairness as kube-scheduler): for running another
// scheduler with the same identity and priority.
func (cp *ControlPlane) SchedulerKubeconfigPath() string { return cp.layout.path(kubeconfigScheduler) }

// Server is the kube-apiserver URL.
func (cp *ControlPlane) Server() string { return cp.layout.Server() }

// Dir is the directory holding the control plane's files and logs.
func (cp *ControlPlane) Dir() string { return cp.cfg.Dir }

// RESTConfig returns an admin client configuration.
func (cp *ControlPlane) RESTConfig() *rest.Config {
	return &rest.Config{
		Host:            cp.layout.Server(),
		BearerToken:     cp.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: cp.layout.PKI.CAPEM},
	}
}

// CAData is the PEM of the cluster CA, for clients built from other credentials.
func (cp *ControlPlane) CAData() []byte { return cp.layout.PKI.CAPEM }

// Exited returns the name of a component that has exited, or "".
func (cp *ControlPlane) Exited() string {
	for _, p := range cp.procs {
		if p.exited() {
			return p.name
		}
	}
	return ""
}

// Stop stops every component (newest first) and removes a temporary directory.
// It is safe to call more than once.
func (cp *ControlPlane) Stop() {
	for i := len(cp.procs) - 1; i >= 0; i-- {
		cp.procs[i].stop(10 * time.Second)
	}
	cp.procs = nil
	if cp.removeDir && cp.cfg.Dir != "" {
		_ = os.RemoveAll(cp.cfg.Dir)
	} else if cp.cfg.ScrubOnStop && cp.cfg.Dir != "" {
		cp.scrub()
	}
}

// scrub removes the secrets from Dir: private keys, the token file,
// kubeconfigs (they hold tokens) and etcd's data (it holds Secrets).
func (cp *ControlPlane) scrub() {
	_ = os.RemoveAll(filepath.Join(cp.cfg.Dir, "etcd"))
	entries, _ := os.ReadDir(cp.cfg.Dir)
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() && (strings.HasSuffix(name, ".key") || strings.HasSuffix(name, ".kubeconfig") || name == "tokens.csv") {
			_ = os.Remove(filepath.Join(cp.cfg.Dir, name))
		}
	}
}

// RestartAPIServer stops kube-apiserver (SIGTERM, then SIGKILL after 10s),
// leaves it down for the given time, starts it again with the same
// arguments (same port, certificates and etcd, so clients reconnect by
// themselves) and returns once it answers /readyz again. Its log goes on in
// the same file. For fault tests: what clients see during an API server
// restart or upgrade.
func (cp *ControlPlane) RestartAPIServer(ctx context.Context, down time.Duration) error {
	i := slices.IndexFunc(cp.procs, func(p *process) bool { return p.name == APIServer })
	if i < 0 {
		return errors.New("kube-apiserver is not running")
	}
	cp.procs[i].stop(10 * time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(down):
	}
	p, err := startProcessLog(APIServer, filepath.Join(cp.cfg.BinDir, APIServer), cp.apiServerArgs, cp.cfg.APIServerEnv, filepath.Join(cp.cfg.Dir, "logs"), true)
	if err != nil {
		return err
	}
	cp.procs[i] = p
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.ReadyTimeout)
	defer cancel()
	return waitFor(ctx, p, "kube-apiserver", cp.probe("/readyz", cp.layout.APIServerPort, true))
}

// PID returns the process ID of a running component, or 0.
func (cp *ControlPlane) PID(component string) int {
	for _, p := range cp.procs {
		if p.name == component && !p.exited() {
			return p.cmd.Process.Pid
		}
	}
	return 0
}
