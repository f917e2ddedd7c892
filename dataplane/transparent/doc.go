// Package transparent is what a connection the kernel redirected to the
// proxy (NAT, to its transparent listener) brings before and around its
// judging, which is dataplane's, as a CONNECT's: where it was sent
// (OriginalDst: SO_ORIGINAL_DST), and the Writer it is judged with in
// place of a CONNECT's — its start read once and kept for the tunnel that
// takes the connection, a denial answered only to a client that speaks
// plain HTTP.
package transparent
