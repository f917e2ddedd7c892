// Package sandboxdns is the DNS server the proxy answers a sandbox's
// queries with, on the transparent side (`portcullis proxy
// --transparent-listen`): the only resolver a sandbox under `portcullis
// run` can reach.
//
// It answers only what the policy could allow, and tells nobody anything
// else: a name no endpoint could match (Config.Wants) is answered NXDOMAIN
// without asking any resolver, so a sandbox cannot leak data through DNS
// queries for names of its choosing. A wanted name's A query is answered
// from Config.Lookup (the proxy's resolver), looked up once per name per
// TTL however many clients ask; its AAAA and other types are answered with
// no records (NOERROR), since the sandbox is served over IPv4 only.
//
// The server remembers which names it answered with which address (Names):
// a connection the kernel later redirects to the proxy carries only the
// address dialled, and the proxy judges it by the name the sandbox
// resolved.
//
// Strict on what it reads: one question per query, class IN, no records in
// the answer and authority sections, at most an OPT record (EDNS version 0)
// in the additional one. A packet that is a response, or too short to
// carry a header, is dropped; one that does not parse, or breaks those
// rules, is answered FORMERR; an opcode other than QUERY, NOTIMP; a class
// other than IN, REFUSED. TCP is not served.
package sandboxdns
