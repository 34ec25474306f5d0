package serving

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// certificateSource gives the HTTPS server its certificate.
type certificateSource interface {
	tlsConfig(ctx context.Context) *tls.Config
}

func baseTLSConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"}}
}

// selfSigned is a certificate generated in memory at start, as
// kube-controller-manager makes one when given none: the private key never
// touches the disk. Clients (Prometheus, probes) do not verify it.
type selfSigned struct{ cert tls.Certificate }

func newSelfSigned(bindAddress string) (*selfSigned, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the self-signed serving key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	dns := []string{"localhost"}
	if host != "" && host != "localhost" {
		dns = append(dns, host)
	}
	ips := []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
	if ip := net.ParseIP(bindAddress); ip != nil && !ip.IsUnspecified() && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: fmt.Sprintf("nodeshepherd@%d", now.Unix())},
		NotBefore:             now.Add(-time.Hour), // clock skew
		NotAfter:              now.Add(365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		DNSNames:              dns,
		IPAddresses:           ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("creating the self-signed serving certificate: %w", err)
	}
	return &selfSigned{cert: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}, nil
}

func (s *selfSigned) tlsConfig(context.Context) *tls.Config {
	c := baseTLSConfig()
	c.Certificates = []tls.Certificate{s.cert}
	return c
}

// fileCertificate is --tls-cert-file and --tls-private-key-file, read again
// when either file changes (a rotated certificate, as cert-manager writes
// it, is served without a restart); a pair that does not load keeps the
// previous one in use and is logged.
type fileCertificate struct {
	certFile, keyFile string
	mu                sync.Mutex
	cert              *tls.Certificate
	certMod, keyMod   time.Time
}

func newFileCertificate(certFile, keyFile string) (*fileCertificate, error) {
	f := &fileCertificate{certFile: certFile, keyFile: keyFile}
	if err := f.reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// reload reads the pair if either file changed since the last read.
func (f *fileCertificate) reload() error {
	ci, err := os.Stat(f.certFile)
	if err != nil {
		return fmt.Errorf("--tls-cert-file: %w", err)
	}
	ki, err := os.Stat(f.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-private-key-file: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cert != nil && ci.ModTime().Equal(f.certMod) && ki.ModTime().Equal(f.keyMod) {
		return nil
	}
	cert, err := tls.LoadX509KeyPair(f.certFile, f.keyFile)
	if err != nil {
		return fmt.Errorf("--tls-cert-file %s and --tls-private-key-file %s: %w", f.certFile, f.keyFile, err)
	}
	f.cert, f.certMod, f.keyMod = &cert, ci.ModTime(), ki.ModTime()
	return nil
}

func (f *fileCertificate) tlsConfig(ctx context.Context) *tls.Config {
	c := baseTLSConfig()
	c.GetCertificate = func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		if err := f.reload(); err != nil {
			klog.FromContext(ctx).Error(err, "Reloading the serving certificate; keeping the previous one")
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.cert, nil
	}
	return c
}
