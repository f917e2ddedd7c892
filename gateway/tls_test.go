package gateway_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect/v2"
	"connectrpc.com/connect/v2/connecthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"

	"github.com/portcullis-dev/portcullis/gateway"
	"github.com/portcullis-dev/portcullis/gateway/gatewaytest"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
)

// selfSigned writes a certificate for 127.0.0.1 and its key to dir and
// returns their paths and a pool that trusts it.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, roots *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "portcullis test gateway"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(cert)
	return certFile, keyFile, roots
}

// TestTLSServing: with TLS the one port serves the APIs over HTTP/2 and
// HTTP/1.1, and a proxy's policy stream over grpc-go (the lighter
// server), all behind the router's TLS termination; plaintext is refused.
func TestTLSServing(t *testing.T) {
	certFile, keyFile, roots := selfSigned(t, t.TempDir())
	gw := gatewaytest.Start(t, "sqlite", func(c *gateway.Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	addr := strings.TrimPrefix(gw.URL, "http://")
	base := "https://" + addr
	tlsCfg := &tls.Config{RootCAs: roots}

	// The APIs over HTTP/2 (ALPN h2).
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true}}
	admin := portcullisv1connect.NewSandboxServiceClient(connect.NewClient(connecthttp.NewTransport(h2, base), gatewaytest.Bearer(gatewaytest.AdminToken)))
	created, err := admin.CreateSandbox(t.Context(), &portcullisv1.CreateSandboxRequest{Name: "tls", Policy: pushPolicy})
	if err != nil {
		t.Fatalf("CreateSandbox over TLS: %v", err)
	}
	if res, err := h2.Get(base + "/healthz"); err != nil || res.ProtoMajor != 2 {
		t.Fatalf("the API client did not speak HTTP/2 over TLS: %v %v", res, err)
	} else {
		res.Body.Close()
	}
	// HTTP/1.1 over TLS.
	h1 := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsCfg, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}}
	res, err := h1.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK || res.ProtoMajor != 1 || string(body) != "ok\n" {
		t.Fatalf("GET /healthz over HTTP/1.1 and TLS: %s %d %q", res.Proto, res.StatusCode, body)
	}

	// A proxy's policy stream with stock grpc-go over TLS.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+created.GetToken()))
	defer cancel()
	st, err := portcullisv1.NewDistributionServiceClient(conn).StreamPolicy(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(hello("tls", "p1")); err != nil {
		t.Fatal(err)
	}
	if sp := recvPolicy(t, st); sp.GetVersion() != 1 {
		t.Fatalf("first version over TLS: %d", sp.GetVersion())
	}

	// The stream's connection went to the grpc-go server.
	req, _ := http.NewRequest(http.MethodGet, base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+gatewaytest.AdminToken)
	res, err = h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if !strings.Contains(string(metrics), `portcullis_connections_total{server="grpc"} 1`) {
		t.Fatalf("no grpc connection counted:\n%s", grepLines(string(metrics), "portcullis_connections_total"))
	}

	// Plaintext on the TLS port is closed without an answer.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	if strings.Contains(string(got), "200 OK") || strings.Contains(string(got), "ok\n") {
		t.Fatalf("plaintext on the TLS port was answered: %q", got)
	}
}

func grepLines(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
