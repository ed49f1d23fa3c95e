package cli_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestServeOverTLS: with --tls-cert and --tls-key serve speaks HTTPS only:
// a client trusting the certificate sends and gets 202; plain HTTP to the
// same port gets no API answer; a key without its certificate is bad input.
func TestServeOverTLS(t *testing.T) {
	t.Parallel()
	env := newAPIEnv(t, "sqlite")
	dir := t.TempDir()
	certPEM, keyPEM := selfSigned(t)
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeFile(t, certFile, string(certPEM))
	writeFile(t, keyFile, string(keyPEM))

	p, base := startAPI(t, env.e, "--tls-cert", certFile, "--tls-key", keyFile)
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("serve with a certificate listens on %s, want https://", base)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(certPEM) {
		t.Fatal("test certificate does not parse")
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/messages", strings.NewReader(orderBody))
	req.Header.Set("Authorization", "Bearer "+env.shop)
	req.Header.Set("Idempotency-Key", "tls-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("HTTPS send: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted || resp.TLS == nil {
		t.Fatalf("HTTPS send: %d (TLS %v), want 202 over TLS", resp.StatusCode, resp.TLS != nil)
	}
	plain, err := http.Get("http://" + strings.TrimPrefix(base, "https://") + "/v1/openapi.json")
	if err == nil {
		plain.Body.Close()
		if plain.StatusCode == http.StatusOK {
			t.Fatalf("plain HTTP to the TLS port was answered 200")
		}
	}
	_ = p.proc.Signal(syscall.SIGTERM)
	if err := <-p.done; err != nil {
		t.Fatalf("serve on SIGTERM: %v: %s", err, p.log.String())
	}

	// A key with no certificate, and a certificate that is not one.
	_, out, code := env.e.try("serve", "--addr", "127.0.0.1:0", "--tls-key", keyFile)
	if code != 2 || !strings.Contains(out, "--tls-cert and --tls-key together") {
		t.Fatalf("--tls-key alone: exit %d: %s", code, out)
	}
	_, out, code = env.e.try("serve", "--addr", "127.0.0.1:0", "--tls-cert", keyFile, "--tls-key", keyFile)
	if code != 2 || !strings.Contains(out, "--tls-cert/--tls-key") {
		t.Fatalf("a key as the certificate: exit %d: %s", code, out)
	}
}

// selfSigned makes a certificate for 127.0.0.1 and its key, PEM encoded.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "msgq test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
}
