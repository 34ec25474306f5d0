package serving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/path"
)

func TestValidateInsecureAddress(t *testing.T) {
	for addr, ok := range map[string]bool{
		"0": true, "": true, "127.0.0.1:8080": true, "[::1]:0": true, "localhost:9000": true, "127.0.0.2:80": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:8080": false, "example.com:80": false, "127.0.0.1": false, "127.0.0.1:x": false,
	} {
		err := validateInsecure(addr)
		if (err == nil) != ok {
			t.Errorf("--metrics-bind-address %q: error %v, want ok=%v", addr, err, ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--metrics-bind-address") {
			t.Errorf("error for %q does not name the flag: %v", addr, err)
		}
	}
}

func TestValidateOptions(t *testing.T) {
	o := NewOptions()
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(*Options)
		want   string
	}{
		"port":       {func(o *Options) { o.SecurePort = 70000 }, "--secure-port 70000"},
		"bind":       {func(o *Options) { o.BindAddress = "eth0" }, `--bind-address "eth0"`},
		"cert alone": {func(o *Options) { o.TLSCertFile = "/c.pem" }, "go together"},
		"cert gone":  {func(o *Options) { o.TLSCertFile, o.TLSPrivateKeyFile = "/nonexistent/c.pem", "/nonexistent/k.pem" }, "--tls-cert-file"},
		"kubeconfig": {func(o *Options) { o.AuthorizationKubeconfig = "/nonexistent/kc" }, "--authorization-kubeconfig /nonexistent/kc"},
		"paths":      {func(o *Options) { o.AlwaysAllowPaths = []string{"/a*b"} }, "--authorization-always-allow-paths"},
		"plain":      {func(o *Options) { o.InsecureAddress = ":8080" }, "loopback"},
		"contention": {func(o *Options) { o.Profiling, o.ContentionProfiling = false, true }, "--contention-profiling needs --profiling"},
	} {
		o := NewOptions()
		tc.mutate(&o)
		err := o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", name, err, tc.want)
		}
	}
}

// TestHandlerDecisions checks the order of the checks on a handler with
// stand-ins for the API server's reviews (the real ones are tested in
// test/integration/serving_test.go): no token is anonymous, a bad token
// 401, always-allow paths need no review, system:masters none either, a
// review's denial 403 and its error 500.
func TestHandlerDecisions(t *testing.T) {
	paths, err := path.NewAuthorizer(DefaultAlwaysAllowPaths)
	if err != nil {
		t.Fatal(err)
	}
	var reviewed []string
	review := authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		reviewed = append(reviewed, a.GetUser().GetName()+" "+a.GetVerb()+" "+a.GetPath())
		switch a.GetUser().GetName() {
		case "reader":
			return authorizer.DecisionAllow, "", nil
		case "broken":
			return authorizer.DecisionNoOpinion, "", errors.New("API server unreachable")
		}
		return authorizer.DecisionNoOpinion, "no RBAC rule", nil
	})
	s := &Secure{
		authn: authenticator.RequestFunc(func(r *http.Request) (*authenticator.Response, bool, error) {
			tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
			switch tok {
			case "":
				return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous}}, true, nil
			case "admin":
				return &authenticator.Response{User: &user.DefaultInfo{Name: "admin", Groups: []string{user.SystemPrivilegedGroup}}}, true, nil
			case "reader", "other", "broken":
				return &authenticator.Response{User: &user.DefaultInfo{Name: tok}}, true, nil
			}
			return nil, false, errors.New("invalid bearer token")
		}),
		authz: []authorizer.UnconditionalAuthorizer{paths, groupAuthorizer(user.SystemPrivilegedGroup), review},
	}
	h := s.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	for _, tc := range []struct {
		method, path, token string
		want                int
	}{
		{"GET", "/healthz", "", 200},
		{"GET", "/readyz", "", 200},
		{"GET", "/livez", "other", 200},
		{"GET", "/healthz", "bogus", 401},
		{"GET", "/metrics", "", 403},
		{"GET", "/metrics", "other", 403},
		{"GET", "/metrics", "reader", 200},
		{"HEAD", "/metrics", "reader", 200},
		{"GET", "/metrics", "admin", 200},
		{"GET", "/metrics", "broken", 500},
	} {
		req, _ := http.NewRequest(tc.method, "https://x"+tc.path, nil)
		if tc.token != "" {
			req.Header.Set("Authorization", "Bearer "+tc.token)
		}
		rec := &recorder{header: http.Header{}}
		h.ServeHTTP(rec, req)
		if rec.code != tc.want {
			t.Errorf("%s %s as %q: %d, want %d", tc.method, tc.path, tc.token, rec.code, tc.want)
		}
	}
	want := "system:anonymous get /metrics|other get /metrics|reader get /metrics|reader get /metrics|broken get /metrics"
	if got := strings.Join(reviewed, "|"); got != want {
		t.Errorf("SubjectAccessReviews asked:\n %s\nwant\n %s", got, want)
	}
}

type recorder struct {
	header http.Header
	code   int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.code == 0 {
		r.code = 200
	}
	return len(b), nil
}
func (r *recorder) WriteHeader(c int) { r.code = c }

// TestSelfSignedAndFileCertificates serves HTTPS with a generated
// certificate, then with files that are replaced while serving.
func TestSelfSignedAndFileCertificates(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	self, err := newSelfSigned("0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(self.cert.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("self-signed certificate: %v", err)
	}

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	writePair := func(s *selfSigned) {
		t.Helper()
		keyDER, err := x509.MarshalPKCS8PrivateKey(s.cert.PrivateKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.cert.Certificate[0]}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writePair(self)
	fc, err := newFileCertificate(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	s := &Secure{Address: "127.0.0.1:0", cert: fc,
		authn: authenticator.RequestFunc(func(*http.Request) (*authenticator.Response, bool, error) {
			return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous}}, true, nil
		}),
		authz: []authorizer.UnconditionalAuthorizer{authorizer.AuthorizerFunc(func(context.Context, authorizer.Attributes) (authorizer.Decision, string, error) {
			return authorizer.DecisionAllow, "", nil
		})}}
	errc := make(chan error, 1)
	addr, err := s.Serve(ctx, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }), errc)
	if err != nil {
		t.Fatal(err)
	}
	served := func() []byte {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
		resp, err := c.Get("https://" + addr + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.TLS.PeerCertificates[0].Raw
	}
	if got := served(); string(got) != string(self.cert.Certificate[0]) {
		t.Error("the server does not serve --tls-cert-file")
	}
	rotated, err := newSelfSigned("0.0.0.0")
	if err != nil {
		t.Fatal(err)
	}
	writePair(rotated)
	// A different modification time is what triggers the reload; make sure
	// the clock's granularity does not hide the change.
	later := fc.certMod.Add(2e9)
	_ = os.Chtimes(certFile, later, later)
	_ = os.Chtimes(keyFile, later, later)
	if got := served(); string(got) != string(rotated.cert.Certificate[0]) {
		t.Error("a replaced certificate is not served")
	}
	// Plain HTTP on the HTTPS port is refused.
	resp, err := http.Get("http://" + addr + "/healthz")
	if err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("plain HTTP served on the HTTPS port")
		}
	}
	select {
	case err := <-errc:
		t.Fatal(err)
	default:
	}
}
