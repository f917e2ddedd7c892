// Package openshell is a conformance suite: cases ported from NVIDIA
// OpenShell's own tests. It has no code of its own besides this comment.
package openshell
