package sandboxdns

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/portcullis-dev/portcullis/policy"
)

// FuzzAnswer: whatever a sandbox sends, the server does not panic,
// answers only with a well-formed response to the same id, and looks up
// only names it was right to want.
func FuzzAnswer(f *testing.F) {
	seed := func(name string, qtype uint16, edit func(*dns.Msg)) {
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		if edit != nil {
			edit(m)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed("api.example.com.", dns.TypeA, nil)
	seed("API.example.com.", dns.TypeAAAA, nil)
	seed("evil.test.", dns.TypeTXT, nil)
	seed("api.example.com.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(4096, true) })
	seed("api.example.com.", dns.TypeA, func(m *dns.Msg) { m.SetEdns0(512, false); m.IsEdns0().SetVersion(2) })
	seed("version.bind.", dns.TypeTXT, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS })
	seed("api.example.com.", dns.TypeA, func(m *dns.Msg) { m.Opcode = dns.OpcodeUpdate })
	seed("api.example.com.", dns.TypeA, func(m *dns.Msg) {
		m.Question = append(m.Question, dns.Question{Name: "b.example.com.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	})
	seed("x\\000.example.com.", dns.TypeA, nil)
	f.Add([]byte{})
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{0, 1, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0xc0, 0x0c, 0, 1, 0, 1})

	s, err := New(Config{
		Wants: func(name string) bool { return strings.HasSuffix(name, "example.com") },
		Lookup: func(_ context.Context, name string) ([]netip.Addr, error) {
			if !policy.ValidHostName(name) || !strings.HasSuffix(name, "example.com") {
				f.Errorf("Lookup(%q)", name)
			}
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		},
		MaxNames: 16, MaxAddrs: 16,
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, pkt []byte) {
		out := s.answer(context.Background(), pkt)
		if out == nil {
			return
		}
		if len(out) > dns.MinMsgSize {
			t.Errorf("an answer of %d bytes", len(out))
		}
		r := new(dns.Msg)
		if err := r.Unpack(out); err != nil {
			t.Fatalf("answer does not parse: %v", err)
		}
		if !r.Response || r.Id != uint16(pkt[0])<<8|uint16(pkt[1]) {
			t.Fatalf("answer %v to %x", r.MsgHdr, pkt)
		}
	})
}
