package dataplane

import (
	"crypto/tls"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/portcullis-dev/portcullis/dataplane/tunnelstart"
)

// clientHello returns the TLS records of a real ClientHello from Go's
// client for serverName ("" sends no SNI).
func clientHello(t *testing.T, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true}).Handshake()
	}()
	head := make([]byte, 5)
	if _, err := io.ReadFull(s, head); err != nil {
		t.Fatal(err)
	}
	body := make([]byte, int(head[3])<<8|int(head[4]))
	if _, err := io.ReadFull(s, body); err != nil {
		t.Fatal(err)
	}
	s.Close()
	c.Close()
	<-done
	return append(head, body...)
}

// splitRecord splits a one-record handshake into two records.
func splitRecord(rec []byte, at int) []byte {
	body := rec[5:]
	mk := func(b []byte) []byte {
		return append([]byte{rec[0], rec[1], rec[2], byte(len(b) >> 8), byte(len(b))}, b...)
	}
	return append(mk(body[:at]), mk(body[at:])...)
}

// The start of an L4 tunnel: TLS server names and HTTP Hosts must be the
// CONNECT host; other protocols pass; an incomplete start waits for more.
func TestStartVerdict(t *testing.T) {
	tgt := dest{host: "raw.good.test", port: 8080}
	good := clientHello(t, "raw.good.test")
	evil := clientHello(t, "api.good.test")
	const (
		relay = "relay"
		more  = "more"
	)
	for _, tc := range []struct {
		name string
		data string
		want string // relay, more, or a substring of the denial
	}{
		{"tls same sni", string(good), relay},
		{"tls sni in capitals", string(clientHello(t, "RAW.Good.Test")), relay},
		{"tls no sni", string(clientHello(t, "")), relay},
		{"tls other sni", string(evil), `"api.good.test" differs`},
		{"tls other sni over two records", string(splitRecord(evil, 40)), `"api.good.test" differs`},
		{"tls same sni over two records", string(splitRecord(good, 40)), relay},
		{"tls partial record", string(good[:len(good)-1]), more},
		{"tls partial header", string(good[:3]), more},
		{"tls first of two records", string(splitRecord(evil, 40)[:45]), more},
		{"tls not a hello", "\x16\x03\x01\x00\x05hello", "not a ClientHello"},
		{"tls garbage hello", "\x16\x03\x01\x00\x08\x01\x00\x00\x04abcd", "malformed"},

		{"http host", "GET / HTTP/1.1\r\nHost: raw.good.test:8080\r\n\r\n", relay},
		{"http host without port", "GET / HTTP/1.1\r\nhost: RAW.good.test\r\n\r\n", relay},
		{"http absolute target", "GET http://raw.good.test:8080/x HTTP/1.1\r\nHost: raw.good.test:8080\r\n\r\n", relay},
		{"http other host", "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:8080\r\n\r\n", `Host header "127.0.0.1:8080" differs`},
		{"http other host after empty lines", "\r\n\r\nPOST /mcp HTTP/1.1\r\nHost: api.good.test\r\n\r\n", "differs"},
		{"http bare lf", "POST /mcp HTTP/1.1\nHost: api.good.test\n\n", "differs"},
		{"http spaced host name", "GET / HTTP/1.1\r\nHost : api.good.test\r\n\r\n", "differs"},
		{"http no host", "GET / HTTP/1.1\r\nAccept: */*\r\n\r\n", "0 Host headers"},
		{"http two hosts", "GET / HTTP/1.1\r\nHost: raw.good.test\r\nHost: api.good.test\r\n\r\n", "2 Host headers"},
		// U+017F (long s) folds to s in Unicode, not in HTTP: not a Host.
		{"http look-alike host name", "GET / HTTP/1.1\r\nHo\u017ft: raw.good.test\r\n\r\n", "0 Host headers"},
		{"http folded", "GET / HTTP/1.1\r\nHost: raw.good.test\r\n api.good.test\r\n\r\n", "folds"},
		{"http no colon", "GET / HTTP/1.1\r\nHost raw.good.test\r\n\r\n", "without a colon"},
		{"http absolute other", "GET http://api.good.test/x HTTP/1.1\r\nHost: raw.good.test\r\n\r\n", "targets"},
		{"http authority other", "CONNECT api.good.test:443 HTTP/1.1\r\nHost: raw.good.test\r\n\r\n", "targets"},
		{"h2 prior knowledge", "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "0 Host headers"},
		{"http partial line", "POST /mcp HTT", more},
		{"http partial head", "POST /mcp HTTP/1.1\r\nHost: api.good.test\r\n", more},
		{"empty lines only", "\r\n", more},

		{"ssh", "SSH-2.0-OpenSSH_9.6\r\n", relay},
		{"smtp", "EHLO me\r\n", relay},
		{"redis", "*1\r\n$4\r\nPING\r\n", relay},
		{"postgres startup", "\x00\x00\x00\x08\x04\xd2\x16\x2f", relay},
		{"http/0.9", "GET /\r\n", relay},
		{"binary after a letter", "A\x00\x01", relay},
		{"text without newline yet", "EHLO me", more},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := tunnelstart.Judge([]byte(tc.data), tgt.want())
			switch {
			case tc.want == more:
				if !v.More {
					t.Errorf("verdict %+v, want more", v)
				}
			case tc.want == relay:
				if v.More || v.Reason != "" {
					t.Errorf("verdict %+v, want relay", v)
				}
			default:
				if v.More || !strings.Contains(v.Reason, tc.want) {
					t.Errorf("verdict %+v, want a denial containing %q", v, tc.want)
				}
			}
		})
	}
}

// A transparent connection's HTTP Host may name its original address
// instead of its name; a CONNECT's may not name an address it does not.
func TestTransparentStartNamesAddress(t *testing.T) {
	transparent := dest{host: "raw.good.test", port: 8080, orig: netip.MustParseAddr("192.0.2.7")}
	connect := dest{host: "raw.good.test", port: 8080}
	for _, tc := range []struct {
		host                 string
		transparentOK, conOK bool
	}{
		{"raw.good.test:8080", true, true},
		{"192.0.2.7:8080", true, false},
		{"192.0.2.7", true, false},
		{"[::ffff:192.0.2.7]:8080", true, false},
		{"192.0.2.8:8080", false, false},
		{"192.0.2.7:9090", false, false},
	} {
		data := []byte("GET / HTTP/1.1\r\nHost: " + tc.host + "\r\n\r\n")
		if v := tunnelstart.Judge(data, transparent.want()); (v.Reason == "") != tc.transparentOK || v.Name != tc.host {
			t.Errorf("transparent, Host %s: %+v; want relayed %v", tc.host, v, tc.transparentOK)
		}
		if v := tunnelstart.Judge(data, connect.want()); (v.Reason == "") != tc.conOK {
			t.Errorf("CONNECT, Host %s: %+v; want relayed %v", tc.host, v, tc.conOK)
		}
	}
}
