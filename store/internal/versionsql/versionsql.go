// Package versionsql is what the two store engines share about reading
// policy versions: their columns and how a row is scanned (the document
// as text, so its bytes are kept exactly), a sandbox's history without
// documents, one version with its document and the hashes of a range of
// versions, on a sqlexec.Engine. Each engine inserts versions itself.
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

// Get is GetPolicyVersion for both engines: one version with its
// document, the sandbox's current one for version 0 (ErrNotFound).
func Get(ctx context.Context, e sqlexec.Engine, sandbox string, version int64) (store.PolicyVersion, error) {
	if version < 0 {
		return store.PolicyVersion{}, fmt.Errorf("get policy %q version %d: %w", sandbox, version, store.ErrNotFound)
	}
	q, args := `SELECT `+Columns+`, pv.document
		FROM policy_versions pv JOIN sandboxes s ON s.name = pv.sandbox
		WHERE pv.sandbox = `+e.Param(1)+` AND pv.version = `, []any{sandbox}
	if version == 0 {
		q += `s.current_version`
	} else {
		q, args = q+e.Param(2), append(args, version)
	}
	var pv store.PolicyVersion
	found := false
	err := e.Rows(ctx, q, args, func(scan func(...any) error) (err error) {
		found = true
		pv, err = Scan(scan)
		return err
	})
	if err == nil && !found {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("get policy %q version %d: %w", sandbox, version, err)
	}
	return pv, nil
}

// List is ListPolicyVersions for both engines: the sandbox's versions,
// oldest first, without documents (ErrNotFound when the sandbox does not
// exist).
func List(ctx context.Context, e sqlexec.Engine, sandbox string) ([]store.PolicyVersion, error) {
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
	if len(out) > 0 {
		return out, nil
	}
	exists := false
	err = e.Rows(ctx, `SELECT 1 FROM sandboxes WHERE name = `+e.Param(1), []any{sandbox}, func(func(...any) error) error {
		exists = true
		return nil
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("get sandbox %q: %w", sandbox, err)
	case !exists:
		return nil, fmt.Errorf("get sandbox %q: %w", sandbox, store.ErrNotFound)
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
