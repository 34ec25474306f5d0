// Package serving serves nodeshepherd's /metrics, /healthz, /readyz and
// /livez as kube-controller-manager does: on HTTPS, with authentication and
// authorization delegated to the API server (TokenReview and
// SubjectAccessReview, k8s.io/apiserver's delegating authenticator and
// authorizer), and with kube-controller-manager's flag names. Plain HTTP,
// unauthenticated, is served only when asked for, and only on a loopback
// address: a local run's opt-in, never a way into the cluster.
package serving

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/wait"
	apiserverapi "k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/path"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
)

// DefaultSecurePort is --secure-port's default. kube-controller-manager
// serves on 10257, cloud-controller-manager on 10258, kube-scheduler on
// 10259 and cloud-controller-manager's webhooks on 10260; nodeshepherd runs
// next to all of them (in a pod, or on a control-plane host with the host's
// network), so it takes the next port of that range.
const DefaultSecurePort = 10261

// DefaultAlwaysAllowPaths are kube-controller-manager's: probes need no
// token (they still go through authentication, as anonymous).
var DefaultAlwaysAllowPaths = []string{"/healthz", "/readyz", "/livez"}

// Delegation settings: kube-controller-manager's defaults
// (k8s.io/apiserver's DelegatingAuthenticationOptions and
// DelegatingAuthorizationOptions).
const (
	authnCacheTTL     = 10 * time.Second
	authzAllowTTL     = 10 * time.Second
	authzDenyTTL      = 10 * time.Second
	reviewTimeout     = 10 * time.Second
	privilegedGroup   = user.SystemPrivilegedGroup // system:masters: the API server allows them everything anyway
	delegateQPS       = 50
	delegateBurst     = 100
	readHeaderTimeout = 10 * time.Second
)

func retryBackoff() *wait.Backoff {
	return &wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}
}

// Options are the serving flags of `nodeshepherd run`.
type Options struct {
	BindAddress              string
	SecurePort               int
	TLSCertFile              string
	TLSPrivateKeyFile        string
	AuthenticationKubeconfig string
	AuthorizationKubeconfig  string
	AlwaysAllowPaths         []string
	// InsecureAddress is --metrics-bind-address: plain HTTP without
	// authentication, on a loopback address only; "0" (the default) is off.
	InsecureAddress string
	// Profiling serves Go's profiles under /debug/pprof/ on both servers
	// (kube-controller-manager's and kube-scheduler's --profiling, on by
	// default there too); on HTTPS the path is authorized as any other.
	// ContentionProfiling also records where goroutines block.
	Profiling, ContentionProfiling bool
}

// NewOptions returns the defaults: HTTPS on 0.0.0.0:10261, no plain HTTP.
func NewOptions() Options {
	return Options{BindAddress: "0.0.0.0", SecurePort: DefaultSecurePort,
		AlwaysAllowPaths: append([]string(nil), DefaultAlwaysAllowPaths...), InsecureAddress: "0", Profiling: true}
}

// AddFlags registers the serving flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.IntVar(&o.SecurePort, "secure-port", o.SecurePort, "Port of the HTTPS server of /metrics, /healthz, /readyz and /livez, with delegated authentication and authorization; 0 turns it off.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "IP address the HTTPS server listens on (0.0.0.0 or :: for every interface).")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "PEM certificate (with intermediates) of the HTTPS server, re-read when it changes; without it and --tls-private-key-file, a self-signed certificate is generated in memory at start.")
	fs.StringVar(&o.TLSPrivateKeyFile, "tls-private-key-file", o.TLSPrivateKeyFile, "PEM private key matching --tls-cert-file.")
	fs.StringVar(&o.AuthenticationKubeconfig, "authentication-kubeconfig", o.AuthenticationKubeconfig, "kubeconfig of the API server that checks the HTTPS server's bearer tokens (TokenReview, tokenreviews create); empty: the controllers' own connection (--kubeconfig or in-cluster).")
	fs.StringVar(&o.AuthorizationKubeconfig, "authorization-kubeconfig", o.AuthorizationKubeconfig, "kubeconfig of the API server that authorizes the HTTPS server's requests (SubjectAccessReview, subjectaccessreviews create); empty: the controllers' own connection (--kubeconfig or in-cluster).")
	fs.StringSliceVar(&o.AlwaysAllowPaths, "authorization-always-allow-paths", o.AlwaysAllowPaths, "Paths the HTTPS server serves to any authenticated or anonymous client without a SubjectAccessReview; a trailing * matches a prefix.")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "Serve Go's CPU, heap, goroutine and other profiles at /debug/pprof/ (as kube-controller-manager and kube-scheduler do); on the HTTPS server the path needs authorization (nonResourceURLs /debug/pprof/*, get) unless --authorization-always-allow-paths names it.")
	fs.BoolVar(&o.ContentionProfiling, "contention-profiling", o.ContentionProfiling, "With --profiling, also record where goroutines block on channels and locks (/debug/pprof/block and /mutex); costs some CPU.")
	fs.StringVar(&o.InsecureAddress, "metrics-bind-address", o.InsecureAddress, "Plain-HTTP /metrics, /healthz, /readyz and /livez WITHOUT authentication, for local runs: a loopback HOST:PORT (127.0.0.1:8080, [::1]:8080, localhost:8080); 0 turns it off. In a cluster use --secure-port.")
}

// Validate checks the flags and reads the files they name, so that a bad
// certificate or kubeconfig is a usage error at start.
func (o *Options) Validate() error {
	var errs []error
	if o.SecurePort < 0 || o.SecurePort > 65535 {
		errs = append(errs, fmt.Errorf("--secure-port %d must be between 0 (off) and 65535", o.SecurePort))
	}
	if net.ParseIP(o.BindAddress) == nil {
		errs = append(errs, fmt.Errorf("--bind-address %q is not an IP address (0.0.0.0 listens on every interface)", o.BindAddress))
	}
	if (o.TLSCertFile == "") != (o.TLSPrivateKeyFile == "") {
		errs = append(errs, errors.New("--tls-cert-file and --tls-private-key-file go together: give both, or neither for a self-signed certificate"))
	} else if o.TLSCertFile != "" {
		if _, err := newFileCertificate(o.TLSCertFile, o.TLSPrivateKeyFile); err != nil {
			errs = append(errs, err)
		}
	}
	for flag, file := range map[string]string{"--authentication-kubeconfig": o.AuthenticationKubeconfig, "--authorization-kubeconfig": o.AuthorizationKubeconfig} {
		if file == "" {
			continue
		}
		if _, err := clientcmd.BuildConfigFromFlags("", file); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", flag, file, err))
		}
	}
	if _, err := path.NewAuthorizer(o.AlwaysAllowPaths); err != nil {
		errs = append(errs, fmt.Errorf("--authorization-always-allow-paths: %w", err))
	}
	if err := validateInsecure(o.InsecureAddress); err != nil {
		errs = append(errs, err)
	}
	if o.ContentionProfiling && !o.Profiling {
		errs = append(errs, errors.New("--contention-profiling needs --profiling: the block and mutex profiles are served at /debug/pprof/"))
	}
	return errors.Join(errs...)
}

// validateInsecure accepts "0", "" or a loopback HOST:PORT.
func validateInsecure(addr string) error {
	if addr == "0" || addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address %q: %v; give a loopback HOST:PORT such as 127.0.0.1:8080, or 0 for off", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("--metrics-bind-address %q: port %q is not a number between 0 and 65535", addr, port)
	}
	if !isLoopback(host) {
		return fmt.Errorf("--metrics-bind-address %q: plain HTTP has no authentication and is served on a loopback address only (127.0.0.1, ::1 or localhost); to serve other hosts use --secure-port (HTTPS, delegated authentication and authorization)", addr)
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Secure is a configured HTTPS server: address, certificate, and the
// delegated authenticator and authorizer.
type Secure struct {
	Address string
	cert    certificateSource
	authn   authenticator.Request
	authz   []authorizer.UnconditionalAuthorizer
}

// NewSecure builds the HTTPS server's configuration, or returns nil when
// --secure-port is 0. main is the controllers' connection, used for the
// delegated reviews unless --authentication-kubeconfig or
// --authorization-kubeconfig name another (in a pod, main is the in-cluster
// configuration, as kube-controller-manager uses when the flags are empty).
func (o *Options) NewSecure(main *rest.Config) (*Secure, error) {
	if o.SecurePort == 0 {
		return nil, nil
	}
	s := &Secure{Address: net.JoinHostPort(o.BindAddress, strconv.Itoa(o.SecurePort))}
	var err error
	if o.TLSCertFile != "" {
		s.cert, err = newFileCertificate(o.TLSCertFile, o.TLSPrivateKeyFile)
	} else {
		s.cert, err = newSelfSigned(o.BindAddress)
	}
	if err != nil {
		return nil, err
	}
	authnClient, err := delegateClient(main, o.AuthenticationKubeconfig, "--authentication-kubeconfig")
	if err != nil {
		return nil, err
	}
	authzClient, err := delegateClient(main, o.AuthorizationKubeconfig, "--authorization-kubeconfig")
	if err != nil {
		return nil, err
	}
	s.authn, _, err = authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                &apiserverapi.AnonymousAuthConfig{Enabled: true},
		TokenAccessReviewClient:  authnClient.AuthenticationV1(),
		TokenAccessReviewTimeout: reviewTimeout,
		WebhookRetryBackoff:      retryBackoff(),
		CacheTTL:                 authnCacheTTL,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authentication: %w", err)
	}
	paths, err := path.NewAuthorizer(o.AlwaysAllowPaths)
	if err != nil {
		return nil, fmt.Errorf("--authorization-always-allow-paths: %w", err)
	}
	delegated, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: authzClient.AuthorizationV1(),
		AllowCacheTTL:             authzAllowTTL,
		DenyCacheTTL:              authzDenyTTL,
		WebhookRetryBackoff:       retryBackoff(),
	}.New()
	if err != nil {
		return nil, fmt.Errorf("delegated authorization: %w", err)
	}
	s.authz = []authorizer.UnconditionalAuthorizer{paths, groupAuthorizer(privilegedGroup), delegated}
	return s, nil
}

// delegateClient is the client of the TokenReviews or SubjectAccessReviews:
// from file when given, else a copy of the controllers' connection with its
// own rate limit (reviews must not queue behind the controllers' writes).
func delegateClient(main *rest.Config, file, flag string) (kubernetes.Interface, error) {
	var cfg *rest.Config
	if file != "" {
		c, err := clientcmd.BuildConfigFromFlags("", file)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flag, file, err)
		}
		cfg = c
	} else {
		cfg = rest.CopyConfig(main)
	}
	cfg.QPS, cfg.Burst = delegateQPS, delegateBurst
	cfg.Timeout = reviewTimeout
	cfg = rest.AddUserAgent(cfg, "nodeshepherd-delegated-auth")
	return kubernetes.NewForConfig(cfg)
}

// groupAuthorizer allows the members of a group without a review, as
// kube-controller-manager allows system:masters.
type groupAuthorizer string

func (g groupAuthorizer) Authorize(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
	if u := a.GetUser(); u != nil {
		for _, grp := range u.GetGroups() {
			if grp == string(g) {
				return authorizer.DecisionAllow, "", nil
			}
		}
	}
	return authorizer.DecisionNoOpinion, "", nil
}

// Handler wraps h with authentication and authorization: no credentials is
// the anonymous user; bad credentials are 401; a request no authorizer
// allows is 403, and one that could not be decided (the API server
// unreachable) is 500. A request's verb is its method's, lowercased as the
// API server names them (GET is get), on the non-resource URL of its path.
func (s *Secure) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		logger := klog.FromContext(r.Context())
		resp, ok, err := s.authn.AuthenticateRequest(r)
		if err != nil || !ok {
			if err != nil {
				logger.V(2).Info("Unauthorized request", "path", r.URL.Path, "remote", r.RemoteAddr, "err", err)
			}
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		attrs := authorizer.AttributesRecord{User: resp.User, Verb: verb(r.Method), Path: r.URL.Path}
		var errs []error
		for _, a := range s.authz {
			decision, _, err := a.Authorize(r.Context(), attrs)
			if err != nil {
				errs = append(errs, err)
			}
			if decision == authorizer.DecisionAllow {
				h.ServeHTTP(w, r)
				return
			}
			if decision == authorizer.DecisionDeny {
				break
			}
		}
		if len(errs) > 0 {
			logger.Error(errors.Join(errs...), "Authorizing a request", "path", r.URL.Path, "user", resp.User.GetName())
			http.Error(w, "Internal Server Error: authorization failed", http.StatusInternalServerError)
			return
		}
		logger.V(2).Info("Forbidden request", "path", r.URL.Path, "user", resp.User.GetName())
		http.Error(w, fmt.Sprintf("forbidden: User %q cannot %s path %q", resp.User.GetName(), attrs.Verb, r.URL.Path), http.StatusForbidden)
	})
}

func verb(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead:
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	default:
		return strings.ToLower(method)
	}
}

// Serve serves h on HTTPS with s's certificate, authentication and
// authorization, until ctx ends. It returns the address it listens on; an
// error of the server later arrives on errc.
func (s *Secure) Serve(ctx context.Context, h http.Handler, errc chan<- error) (string, error) {
	l, err := net.Listen("tcp", s.Address)
	if err != nil {
		return "", fmt.Errorf("--secure-port: listening on %s: %w", s.Address, err)
	}
	srv := &http.Server{Handler: s.Handler(h), ReadHeaderTimeout: readHeaderTimeout, TLSConfig: s.cert.tlsConfig(ctx)}
	start(ctx, srv, errc, func() error { return srv.ServeTLS(l, "", "") })
	return l.Addr().String(), nil
}

// ServeInsecure serves h on plain HTTP, without authentication, on addr
// (a loopback address: Options.Validate checks it for the command line)
// until ctx ends.
func ServeInsecure(ctx context.Context, addr string, h http.Handler, errc chan<- error) (string, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--metrics-bind-address %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: readHeaderTimeout}
	start(ctx, srv, errc, func() error { return srv.Serve(l) })
	return l.Addr().String(), nil
}

func start(ctx context.Context, srv *http.Server, errc chan<- error, serve func() error) {
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	go func() {
		if err := serve(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			select {
			case errc <- err:
			default:
			}
		}
	}()
}
