// Package versionsql is what the two store engines share about reading
// policy versions: their columns and how a row is scanned (the document
// as text, so its bytes are kept exactly), a sandbox's history without
// documents and the hashes of a range of versions, on a sqlexec.Engine.
// Each engine inserts versions and reads one with its document itself.
package versionsql

import (
	"context"
	"fmt"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// Columns are a version's columns but its document, in Scan's order
// (table alias pv).
const Columns = `pv.sandbox, pv.version, pv.hash, pv.author, pv.source, pv.provenance, pv.created_at`

// Scan reads Columns and then the document as text (” in a listing,
// which has none: no Document).
func Scan(scan func(dest ...any) error) (store.PolicyVersion, error) {
	var pv store.PolicyVersion
	var doc string
	var prov []byte
	err := scan(&pv.Sandbox, &pv.Version, &pv.Hash, &pv.Author, &pv.Source, &prov, sqlexec.TimeDest(&pv.CreatedAt), &doc)
	if err != nil {
		return pv, err
	}
	if doc != "" {
		pv.Document = []byte(doc)
	}
	pv.Provenance, err = strmap.Decode(prov)
	return pv, err
}

// List is ListPolicyVersions for both engines: the sandbox's versions,
// oldest first, without documents. With none, it returns what
// getSandbox does (ErrNotFound when the sandbox does not exist).
func List(ctx context.Context, e sqlexec.Engine, sandbox string, getSandbox func() error) ([]store.PolicyVersion, error) {
	var out []store.PolicyVersion
	err := e.Rows(ctx, `SELECT `+Columns+`, ''
		FROM policy_versions pv WHERE pv.sandbox = `+e.Param(1)+` ORDER BY pv.version`, []any{sandbox},
		func(scan func(...any) error) error {
			pv, err := Scan(scan)
			out = append(out, pv)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("list policy versions of %q: %w", sandbox, err)
	}
	if len(out) == 0 {
		if err := getSandbox(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Hashes is PolicyHashes for both engines: the hashes of versions from
// to to, oldest first.
func Hashes(ctx context.Context, e sqlexec.Engine, sandbox string, from, to int64) ([]string, error) {
	var out []string
	err := e.Rows(ctx, `SELECT hash FROM policy_versions
		WHERE sandbox = `+e.Param(1)+` AND version BETWEEN `+e.Param(2)+` AND `+e.Param(3)+` ORDER BY version`,
		[]any{sandbox, from, to}, func(scan func(...any) error) error {
			var h string
			err := scan(&h)
			out = append(out, h)
			return err
		})
	if err != nil {
		return nil, fmt.Errorf("policy hashes of %q versions %d to %d: %w", sandbox, from, to, err)
	}
	return out, nil
}
