package identity

// Caller is the process on the client end of a proxied connection, as far
// as the proxy could tell (procid.go).
type Caller struct {
	// Binary is the absolute path of its executable; "" when unknown.
	Binary string
	// Ancestors are the executables of its parent, grandparent and so on,
	// parent first, up to (not including) the proxy and the proxy's own
	// ancestors. A rule's binary matches the caller when it matches Binary
	// or any of them, as in OpenShell (policy.Request.Ancestors).
	Ancestors []string
}
