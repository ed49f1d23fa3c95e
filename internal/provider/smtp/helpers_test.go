package smtp_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/msgq/msgq/internal/provider"
	"github.com/msgq/msgq/internal/provider/smtp"
	"github.com/msgq/msgq/internal/sim"
	"github.com/msgq/msgq/internal/store"
)

var fixedNow = time.Date(2026, 11, 3, 9, 30, 0, 0, time.UTC)

// simSMTP starts the simulator's SMTP server on a free loopback port;
// ln, when not nil, wraps the listener (implicit TLS).
func simSMTP(t *testing.T, cfg sim.SMTPConfig, wrap func(net.Listener) net.Listener) (*sim.Sim, *sim.SMTPServer, string, int) {
	t.Helper()
	s := sim.New(sim.DefaultConfig())
	t.Cleanup(s.Close)
	srv, err := s.NewSMTPServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	if wrap != nil {
		ln = wrap(ln)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s, srv, "127.0.0.1", addr.Port
}

// client is a provider for the sim at host:port with TLS none unless cfg says.
func client(t *testing.T, host string, port int, edit func(*smtp.Config)) *smtp.Client {
	t.Helper()
	cfg := smtp.Config{Host: host, Port: port, From: "Shop <orders@example.com>", TLS: smtp.TLSNone,
		HELO: "msgq.test", Timeout: 30 * time.Second, Now: func() time.Time { return fixedNow }}
	if edit != nil {
		edit(&cfg)
	}
	c, err := smtp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func msg(id, to string) *provider.Message {
	return &provider.Message{ID: id, Key: "k-" + id, To: to, Channel: "email",
		Payload: store.Payload{Subject: "Your order", Text: "It is ready.\n"}}
}

// testCA is a private CA and a server certificate it signed for 127.0.0.1.
type testCA struct {
	caFile string // PEM of the CA
	server tls.Certificate
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "msgq test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &testCA{caFile: caFile, server: tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}}
}

func (ca *testCA) serverTLS() *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{ca.server}, MinVersion: tls.VersionTLS12}
}

// scripted is a bare TCP server that answers SMTP commands from a script:
// the greeting, then for each command the reply of the first key it starts
// with ("close" closes the connection). It serves one connection and
// reports the commands it read on the returned channel.
func scripted(t *testing.T, greeting string, script map[string]string) (string, int, <-chan []string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	seen := make(chan []string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			seen <- nil
			return
		}
		defer conn.Close()
		var cmds []string
		defer func() { seen <- cmds }()
		_ = conn.SetDeadline(time.Now().Add(time.Minute))
		r := bufio.NewReader(conn)
		if greeting == "close" {
			return
		}
		conn.Write([]byte(greeting + "\r\n"))
		inData := false
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\r\n")
			if inData {
				if line == "." {
					inData = false
					line = "."
				} else {
					continue
				}
			}
			cmds = append(cmds, line)
			up := strings.ToUpper(line)
			answer := "250 2.0.0 OK"
			switch {
			case strings.HasPrefix(up, "EHLO"):
				answer = "250-scripted\r\n250 ENHANCEDSTATUSCODES"
			case up == "DATA":
				answer = "354 End data with <CR><LF>.<CR><LF>"
			}
			for k, v := range script {
				if (k == "." && line == ".") || (k != "." && strings.HasPrefix(up, k)) {
					answer = v
				}
			}
			if answer == "close" {
				return
			}
			if up == "DATA" && strings.HasPrefix(answer, "354") {
				inData = true
			}
			conn.Write([]byte(answer + "\r\n"))
			if strings.HasPrefix(up, "QUIT") {
				return
			}
		}
	}()
	addr := ln.Addr().(*net.TCPAddr)
	return "127.0.0.1", addr.Port, seen
}
