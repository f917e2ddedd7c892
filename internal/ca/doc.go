// Package ca owns the certificate authority a proxy terminates TLS with:
// creating and keeping one on disk (a standalone proxy's), parsing one
// delivered by the gateway (a sandbox's), and minting the leaf
// certificates for inspected endpoints. It lives outside dataplane because
// the gateway generates each sandbox's CA and must not import the proxy.
package ca
