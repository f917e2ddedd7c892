package policy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/portcullis-dev/portcullis/internal/jcs"
)

// Denied tool arguments never leave the sandbox in a decision record: a
// record of a denied tools/call carries only ArgumentsDigest of them, so
// that arguments given later for that denial (to build a proposal that
// admits exactly them) can be checked against what was denied.

// ArgumentsDigest returns "sha256:" and the 64 lower-case hex digits of
// the SHA-256 of CanonicalArguments(raw).
func ArgumentsDigest(raw []byte) (string, error) {
	c, err := CanonicalArguments(raw)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(c)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// CanonicalArguments reads tools/call arguments strictly — one JSON
// object, valid UTF-8, no duplicate keys, nested at most maxNesting
// levels, finite numbers, nothing after it — and writes them in the RFC
// 8785 (JSON Canonicalization Scheme) form (internal/jcs). Two spellings
// of the same arguments (spacing, key order, escapes) have the same
// canonical form.
func CanonicalArguments(raw []byte) ([]byte, error) {
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("arguments must be a JSON object")
	}
	c, err := jcs.Transform(raw, maxNesting)
	if err != nil {
		return nil, fmt.Errorf("arguments: %w", err)
	}
	return c, nil
}

// DefinitionFingerprint is the fingerprint a tools/call rule pins a tool's
// definition by (L7Rule.Definition): "sha256:" and the hex SHA-256 of def,
// the tool object exactly as a server lists it, in its RFC 8785 form. The
// proxy computes it on what it relays, the gateway on what proxies report.
func DefinitionFingerprint(def []byte) (string, error) {
	fp, err := jcs.Digest(def, maxDefinitionDepth)
	if err != nil {
		return "", fmt.Errorf("canonicalise the tool definition (RFC 8785): %w", err)
	}
	return fp, nil
}

// maxDefinitionDepth bounds a tool definition's nesting as the proxy's
// MCP reader bounds every message.
const maxDefinitionDepth = 1000
