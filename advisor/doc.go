// Package advisor turns what a sandbox asks for into a narrow, checked
// change of its policy: ParseProposal reads a proposal file strictly,
// Apply checks each operation against the narrowness allow-list and
// merges it onto a base version, Evaluate also proves what each operation
// adds (package prover), and FromDenial builds the narrowest proposal for
// a denied request. It is pure: it stores nothing and knows no gateway;
// package lifecycle keeps, dedupes and re-bases proposals around it.
package advisor
