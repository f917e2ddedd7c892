package ca

import (
	"container/list"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"github.com/portcullis-dev/portcullis/internal/atomicfile"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

const (
	caCertFile = "ca.pem"
	caKeyFile  = "ca-key.pem"

	caValidity   = 10 * 365 * 24 * time.Hour
	leafValidity = 24 * time.Hour
	// leafBackdate covers clients whose clock runs a little behind ours.
	leafBackdate = time.Hour
	// leafRenewBefore: a cached leaf with less than this left is minted
	// again, so no handshake gets one about to expire.
	leafRenewBefore = 12 * time.Hour
	leafCacheSize   = 1000
)

// CA is the proxy's certificate authority for terminating TLS to L7
// endpoints. It is safe for concurrent use.
type CA struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer

	now       func() time.Time // tests move the clock
	cacheSize int

	mu    sync.Mutex
	lru   *list.List               // of *leafEntry, most recently used first
	byKey map[string]*list.Element // host -> element of lru
}

type leafEntry struct {
	host  string
	ready chan struct{} // closed once cert/err are set
	cert  *tls.Certificate
	err   error
}

// LoadOrCreate loads ca.pem/ca-key.pem from dir, creating them (ECDSA
// P-256, 10 years, CN "Portcullis proxy CA <random>") on first use. Files are
// 0600, dir 0700; a key file readable by group/others is refused, as is one
// file without the other or an expired certificate.
func LoadOrCreate(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, caCertFile), filepath.Join(dir, caKeyFile)
	ca, err := loadCA(certPath, keyPath)
	if !errors.Is(err, os.ErrNotExist) {
		return ca, err
	}
	if _, cerr := os.Stat(certPath); !errors.Is(cerr, os.ErrNotExist) {
		return nil, fmt.Errorf("load proxy CA: %s exists without %s; remove it to create a new CA", certPath, keyPath)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create proxy CA: %w", err)
	}
	certPEM, keyPEM, err := Generate(time.Now())
	if err != nil {
		return nil, fmt.Errorf("create proxy CA: %w", err)
	}
	// The key goes in first, each file complete before it gets its name, and
	// neither replaces an existing file: a proxy starting at the same time
	// in the same dir makes us load its CA instead.
	if err := atomicfile.Create(keyPath, keyPEM); err != nil {
		if errors.Is(err, os.ErrExist) {
			return loadCA(certPath, keyPath)
		}
		return nil, fmt.Errorf("create proxy CA: %w", err)
	}
	if err := atomicfile.Create(certPath, certPEM); err != nil {
		return nil, fmt.Errorf("create proxy CA: %w", err)
	}
	return Parse(certPEM, keyPEM)
}

func loadCA(certPath, keyPath string) (*CA, error) {
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, err // os.ErrNotExist: create one
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("load proxy CA: %s is readable by others (mode %04o); chmod 600 it", keyPath, perm)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, fmt.Errorf("load proxy CA: %w", err)
	}
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("load proxy CA: %s exists without %s; remove it to create a new CA", keyPath, certPath)
	}
	if err != nil {
		return nil, fmt.Errorf("load proxy CA: %w", err)
	}
	ca, err := Parse(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("load proxy CA from %s: %w", filepath.Dir(certPath), err)
	}
	return ca, nil
}

// Generate creates a self-signed CA certificate and its key, PEM-encoded
// (the gateway makes one per sandbox with it).
func Generate(now time.Time) (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	id := make([]byte, 6)
	rand.Read(id)
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		Subject: pkix.Name{
			CommonName:   "Portcullis proxy CA " + hex.EncodeToString(id),
			Organization: []string{"Portcullis"},
		},
		NotBefore:             now.Add(-leafBackdate),
		NotAfter:              now.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true, // it signs leaves only
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

func randomSerial() *big.Int {
	b := make([]byte, 16)
	rand.Read(b)
	b[0] &= 0x7f // positive
	b[0] |= 0x40 // and 16 bytes long
	return new(big.Int).SetBytes(b)
}

// Parse builds a CA from PEM cert and key (the sandbox's, delivered by the
// gateway). The certificate must be a currently valid CA
// certificate and the key (PKCS #8, SEC 1 or PKCS #1) its private key.
func Parse(certPEM, keyPEM []byte) (*CA, error) {
	cb, _ := pem.Decode(certPEM)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, errors.New("CA certificate: no CERTIFICATE PEM block")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	if !cert.IsCA || !cert.BasicConstraintsValid || cert.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, errors.New("CA certificate: not a CA (basic constraints and certSign key usage required)")
	}
	if now := time.Now(); now.After(cert.NotAfter) || now.Before(cert.NotBefore) {
		return nil, fmt.Errorf("CA certificate: valid only from %s to %s", cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339))
	}
	key, err := parseSigner(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	return &CA{
		cert:      cert,
		certPEM:   pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}),
		key:       key,
		now:       time.Now,
		cacheSize: leafCacheSize,
		lru:       list.New(),
		byKey:     make(map[string]*list.Element),
	}, nil
}

func parseSigner(keyPEM []byte) (crypto.Signer, error) {
	kb, _ := pem.Decode(keyPEM)
	if kb == nil {
		return nil, errors.New("no PEM block")
	}
	var (
		key any
		err error
	)
	switch kb.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kb.Bytes)
	default:
		return nil, fmt.Errorf("unsupported PEM block %q", kb.Type)
	}
	if err != nil {
		return nil, err
	}
	s, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("unsupported key type %T", key)
	}
	return s, nil
}

// CertPEM returns the CA certificate, PEM-encoded: what the sandbox must
// trust (`portcullis proxy ca`).
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.certPEM...) }

// TLSConfig returns a server tls.Config that mints (and caches, bounded LRU
// ~1000, safe for concurrent use) a leaf certificate for the SNI name (or IP),
// valid ~24h with a small backdate, SAN = that name/IP, signed by the CA;
// TLS 1.2+; NextProtos ["http/1.1"] (the proxy inspects HTTP/1.1). A client
// that sends no SNI (Go and most clients don't for an IP) fails the
// handshake: use TLSConfigFor with the CONNECT host.
func (c *CA) TLSConfig() *tls.Config { return c.TLSConfigFor("") }

// TLSConfigFor is TLSConfig for a tunnel whose destination is known before
// the handshake (CONNECT host): without SNI, the leaf is minted for host.
// With SNI, the leaf is for the SNI name, as the client expects; comparing
// it with host is the caller's job (tls.ConnectionState.ServerName).
func (c *CA) TLSConfigFor(host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"},
		GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
			name := hello.ServerName
			if name == "" {
				name = host
			}
			if name == "" {
				return nil, errors.New("no SNI in the client hello and no CONNECT host to mint a certificate for")
			}
			return c.Leaf(name)
		},
	}
}

// Leaf returns the certificate for a host name or IP address (what
// TLSConfig uses), for tests and for CONNECT handling that knows the host
// before the handshake. Names are case-insensitive and may end in a dot; an
// IPv6 address may be bracketed. Leaves are cached (LRU) and minted again
// when less than half their life is left; concurrent calls for one host mint
// once.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	key, ip, err := leafName(host)
	if err != nil {
		return nil, err
	}
	now := c.now()

	c.mu.Lock()
	if el, ok := c.byKey[key]; ok {
		e := el.Value.(*leafEntry)
		select {
		case <-e.ready:
			if e.err == nil && now.Before(e.cert.Leaf.NotAfter.Add(-leafRenewBefore)) {
				c.lru.MoveToFront(el)
				c.mu.Unlock()
				return e.cert, nil
			}
			// Stale (or failed): mint again below.
			c.lru.Remove(el)
			delete(c.byKey, key)
		default: // being minted by another caller
			c.lru.MoveToFront(el)
			c.mu.Unlock()
			<-e.ready
			return e.cert, e.err
		}
	}
	e := &leafEntry{host: key, ready: make(chan struct{})}
	c.byKey[key] = c.lru.PushFront(e)
	for c.lru.Len() > c.cacheSize {
		old := c.lru.Back()
		c.lru.Remove(old)
		delete(c.byKey, old.Value.(*leafEntry).host)
	}
	c.mu.Unlock()

	e.cert, e.err = c.mint(key, ip, now)
	close(e.ready)
	if e.err != nil {
		c.mu.Lock()
		if el, ok := c.byKey[key]; ok && el.Value == e {
			c.lru.Remove(el)
			delete(c.byKey, key)
		}
		c.mu.Unlock()
	}
	return e.cert, e.err
}

// leafName normalizes host into the cache key and, for an address, the IP.
// Only what can be a DNS name or an IP is accepted: no wildcards, no spaces,
// nothing a certificate should not say.
func leafName(host string) (string, netip.Addr, error) {
	h := strings.TrimSuffix(strings.ToLower(host), ".")
	if strings.HasPrefix(h, "[") && strings.HasSuffix(h, "]") {
		h = h[1 : len(h)-1]
	}
	if ip, err := netip.ParseAddr(h); err == nil {
		if ip.Zone() != "" {
			return "", netip.Addr{}, fmt.Errorf("leaf certificate for %q: zoned address", host)
		}
		ip = ip.Unmap()
		return ip.String(), ip, nil
	}
	if h == "" || len(h) > 253 {
		return "", netip.Addr{}, fmt.Errorf("leaf certificate for %q: not a host name", host)
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return "", netip.Addr{}, fmt.Errorf("leaf certificate for %q: not a host name", host)
		}
		for i := 0; i < len(label); i++ {
			ch := label[i]
			if !(ch >= 'a' && ch <= 'z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_') {
				return "", netip.Addr{}, fmt.Errorf("leaf certificate for %q: not a host name", host)
			}
		}
	}
	return h, netip.Addr{}, nil
}

// mint signs a fresh leaf for name (ip when valid) with a new P-256 key.
func (c *CA) mint(name string, ip netip.Addr, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	notAfter := now.Add(leafValidity)
	if notAfter.After(c.cert.NotAfter) {
		notAfter = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: randomSerial(),
		NotBefore:    now.Add(-leafBackdate),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if len(name) <= 64 { // the X.509 upper bound for a CN
		tmpl.Subject.CommonName = name
	}
	if ip.IsValid() {
		tmpl.IPAddresses = []net.IP{ip.AsSlice()}
	} else {
		tmpl.DNSNames = []string{name}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("leaf certificate for %s: %w", name, err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der, c.cert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// ReadPool reads the PEM certificates in file into a pool (a proxy's
// --upstream-ca); no file ("") is no pool (nil: the system roots). A file
// with no certificate is refused.
func ReadPool(file string) (*x509.CertPool, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}
