// Package providersql is what the two store engines share about
// credential providers (migration 00019): their columns, the reads (one
// provider, every provider, a sandbox's providers with their sealed
// secrets and its credentials generation in one statement) and the writes
// (insert, the compare-and-set rotation, delete, attach, detach, the
// generation's bump), on a sqlexec.Engine.
package providersql

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/portcullis-dev/portcullis/store"
	"github.com/portcullis-dev/portcullis/store/internal/sqlexec"
	"github.com/portcullis-dev/portcullis/store/internal/strmap"
)

// columns are providers' columns, in the order Insert binds them and
// scan reads them.
var columns = []string{
	"name", "type", "hosts", "settings", "secret_fields", "sealed", "key_id", "revision",
	"created_at", "created_by", "rotated_at", "rotated_by",
}

func selectColumns(alias string) string {
	return alias + "." + strings.Join(columns, ", "+alias+".")
}

// nullString scans a text that may be NULL ("").
type nullString struct{ s *string }

func (d nullString) Scan(src any) error {
	switch v := src.(type) {
	case nil:
		*d.s = ""
	case string:
		*d.s = v
	case []byte:
		*d.s = string(v)
	default:
		return fmt.Errorf("scan text: unexpected %T", src)
	}
	return nil
}

// row is one provider row as scanned; name is "" for the NULL row of a
// sandbox without providers.
type row struct {
	p                      store.Provider
	hosts, settings, field []byte
	created                *time.Time
}

func (r *row) dest() []any {
	return []any{nullString{&r.p.Name}, nullString{&r.p.Type}, &r.hosts, &r.settings, &r.field, &r.p.Sealed,
		nullString{&r.p.KeyID}, &r.p.Revision, sqlexec.NullTimeDest(&r.created), nullString{&r.p.CreatedBy},
		sqlexec.NullTimeDest(&r.p.RotatedAt), nullString{&r.p.RotatedBy}}
}

func (r *row) provider() (store.Provider, error) {
	p := r.p
	if r.created != nil {
		p.CreatedAt = *r.created
	}
	if err := json.Unmarshal(r.hosts, &p.Hosts); err != nil {
		return p, fmt.Errorf("provider %q hosts: %w", p.Name, err)
	}
	if err := json.Unmarshal(r.field, &p.SecretFields); err != nil {
		return p, fmt.Errorf("provider %q secret fields: %w", p.Name, err)
	}
	var err error
	p.Settings, err = strmap.Decode(r.settings)
	return p, err
}

// list runs q (selecting selectColumns("p")) and returns the providers
// with the sandboxes each is attached to.
func list(ctx context.Context, e sqlexec.Engine, q string, args ...any) ([]store.Provider, error) {
	var out []store.Provider
	byName := map[string]int{}
	err := e.Rows(ctx, q, args, func(scan func(...any) error) error {
		var r row
		if err := scan(r.dest()...); err != nil {
			return err
		}
		p, err := r.provider()
		byName[p.Name] = len(out)
		out = append(out, p)
		return err
	})
	if err != nil || len(out) == 0 {
		return out, err
	}
	where, sargs := "", []any(nil)
	if len(out) == 1 {
		where, sargs = ` WHERE provider = `+e.Param(1), []any{out[0].Name}
	}
	err = e.Rows(ctx, `SELECT provider, sandbox FROM sandbox_providers`+where+` ORDER BY provider, sandbox`, sargs,
		func(scan func(...any) error) error {
			var prov, sb string
			if err := scan(&prov, &sb); err != nil {
				return err
			}
			if i, ok := byName[prov]; ok {
				out[i].Sandboxes = append(out[i].Sandboxes, sb)
			}
			return nil
		})
	return out, err
}

// Get returns one provider with its sandboxes (ErrNotFound).
func Get(ctx context.Context, e sqlexec.Engine, name string) (store.Provider, error) {
	return Lock(ctx, e, name, "")
}

// Lock is Get with lock (the engine's locking clause, "" for none) on
// the provider's row.
func Lock(ctx context.Context, e sqlexec.Engine, name, lock string) (store.Provider, error) {
	ps, err := list(ctx, e, `SELECT `+selectColumns("p")+` FROM providers p WHERE p.name = `+e.Param(1)+lock, name)
	if err == nil && len(ps) == 0 {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Provider{}, fmt.Errorf("get provider %q: %w", name, err)
	}
	return ps[0], nil
}

// List returns every provider with its sandboxes, ordered by name.
func List(ctx context.Context, e sqlexec.Engine) ([]store.Provider, error) {
	ps, err := list(ctx, e, `SELECT `+selectColumns("p")+` FROM providers p ORDER BY p.name`)
	if err != nil {
		return nil, fmt.Errorf("list providers: %w", err)
	}
	return ps, nil
}

// SandboxCredentials returns the sandbox's credentials generation and
// its providers (Sandboxes not set) ordered by name, read in one
// statement so that the two agree (ErrNotFound for an unknown sandbox).
func SandboxCredentials(ctx context.Context, e sqlexec.Engine, sandbox string) (int64, []store.Provider, error) {
	var gen int64
	var out []store.Provider
	found := false
	err := e.Rows(ctx, `SELECT s.credentials_generation, `+selectColumns("p")+`
		FROM sandboxes s
		LEFT JOIN sandbox_providers sp ON sp.sandbox = s.name
		LEFT JOIN providers p ON p.name = sp.provider
		WHERE s.name = `+e.Param(1)+`
		ORDER BY p.name`, []any{sandbox}, func(scan func(...any) error) error {
		found = true
		var r row
		var rev *int64
		d := r.dest()
		d[7] = &rev
		if err := scan(append([]any{&gen}, d...)...); err != nil {
			return err
		}
		if r.p.Name == "" {
			return nil
		}
		r.p.Revision = *rev
		p, err := r.provider()
		out = append(out, p)
		return err
	})
	if err == nil && !found {
		err = store.ErrNotFound
	}
	if err != nil {
		return 0, nil, fmt.Errorf("credentials of sandbox %q: %w", sandbox, err)
	}
	return gen, out, nil
}

func encode(p store.Provider) (hosts, settings, fields string, err error) {
	h, err := json.Marshal(nonNil(p.Hosts))
	if err != nil {
		return "", "", "", err
	}
	f, err := json.Marshal(nonNil(p.SecretFields))
	if err != nil {
		return "", "", "", err
	}
	s, err := strmap.Encode(p.Settings)
	return string(h), string(s), string(f), err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func bindTime(e sqlexec.Engine, t *time.Time) any {
	if t == nil {
		return nil
	}
	return e.Time(*t)
}

// Insert stores p as given (Sandboxes ignored): ErrAlreadyExists for a
// taken name, the transaction usable.
func Insert(ctx context.Context, e sqlexec.Engine, p store.Provider) error {
	hosts, settings, fields, err := encode(p)
	if err != nil {
		return fmt.Errorf("insert provider %q: %w", p.Name, err)
	}
	ps := make([]string, len(columns))
	for i := range ps {
		ps[i] = e.Param(i + 1)
	}
	inserted := false
	err = e.Rows(ctx, `INSERT INTO providers (`+strings.Join(columns, ", ")+`) VALUES (`+strings.Join(ps, ", ")+`)
		ON CONFLICT (name) DO NOTHING RETURNING name`,
		[]any{p.Name, p.Type, hosts, settings, fields, p.Sealed, p.KeyID, p.Revision,
			e.Time(p.CreatedAt), p.CreatedBy, bindTime(e, p.RotatedAt), p.RotatedBy},
		func(scan func(...any) error) error { inserted = true; return scan(new(string)) })
	if err == nil && !inserted {
		err = fmt.Errorf("%w: provider %q", store.ErrAlreadyExists, p.Name)
	}
	if err != nil {
		return fmt.Errorf("insert provider %q: %w", p.Name, err)
	}
	return nil
}

// Rotate writes p's secret (sealed, key id, secret fields), revision and
// rotation if its stored revision is still previous: ErrConflict when it
// is not, ErrNotFound when there is no such provider.
func Rotate(ctx context.Context, e sqlexec.Engine, p store.Provider, previous int64) error {
	_, _, fields, err := encode(p)
	if err != nil {
		return fmt.Errorf("rotate provider %q: %w", p.Name, err)
	}
	updated := false
	err = e.Rows(ctx, `UPDATE providers SET sealed = `+e.Param(1)+`, key_id = `+e.Param(2)+`, secret_fields = `+e.Param(3)+
		`, revision = `+e.Param(4)+`, rotated_at = `+e.Param(5)+`, rotated_by = `+e.Param(6)+`
		WHERE name = `+e.Param(7)+` AND revision = `+e.Param(8)+` RETURNING name`,
		[]any{p.Sealed, p.KeyID, fields, p.Revision, bindTime(e, p.RotatedAt), p.RotatedBy, p.Name, previous},
		func(scan func(...any) error) error { updated = true; return scan(new(string)) })
	if err == nil && !updated {
		var cur store.Provider
		if cur, err = Get(ctx, e, p.Name); err == nil {
			err = fmt.Errorf("%w: provider %q is at revision %d, not %d", store.ErrConflict, p.Name, cur.Revision, previous)
		}
	}
	if err != nil {
		return fmt.Errorf("rotate provider %q: %w", p.Name, err)
	}
	return nil
}

// changed runs q, a statement RETURNING one column, and reports whether
// it returned a row.
func changed(ctx context.Context, e sqlexec.Engine, q string, args ...any) (bool, error) {
	ok := false
	err := e.Rows(ctx, q, args, func(scan func(...any) error) error { ok = true; return scan(new(string)) })
	return ok, err
}

// Delete deletes the provider row: ErrNotFound, or ErrInUse when a
// sandbox still refers to it (an attach that committed after the caller
// looked; the engines report the foreign key as ErrNotFound, the
// referenced row being the one in question).
func Delete(ctx context.Context, e sqlexec.Engine, name string) error {
	ok, err := changed(ctx, e, `DELETE FROM providers WHERE name = `+e.Param(1)+` RETURNING name`, name)
	switch {
	case errors.Is(err, store.ErrNotFound): // foreign_key_violation: sandbox_providers refers to it
		err = fmt.Errorf("%w: provider %q is attached to a sandbox", store.ErrInUse, name)
	case err == nil && !ok:
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("delete provider %q: %w", name, err)
	}
	return nil
}

// Attach attaches the provider to the sandbox and reports whether it was
// not attached before.
func Attach(ctx context.Context, e sqlexec.Engine, sandbox, provider string, at time.Time, by string) (bool, error) {
	ok, err := changed(ctx, e, `INSERT INTO sandbox_providers (sandbox, provider, attached_at, attached_by)
		VALUES (`+e.Param(1)+`, `+e.Param(2)+`, `+e.Param(3)+`, `+e.Param(4)+`)
		ON CONFLICT (sandbox, provider) DO NOTHING RETURNING provider`, sandbox, provider, e.Time(at), by)
	if err != nil {
		return false, fmt.Errorf("attach provider %q to sandbox %q: %w", provider, sandbox, err)
	}
	return ok, nil
}

// Detach detaches the provider from the sandbox (ErrNotFound when it is
// not attached).
func Detach(ctx context.Context, e sqlexec.Engine, sandbox, provider string) error {
	ok, err := changed(ctx, e, `DELETE FROM sandbox_providers WHERE sandbox = `+e.Param(1)+` AND provider = `+e.Param(2)+
		` RETURNING provider`, sandbox, provider)
	if err == nil && !ok {
		err = store.ErrNotFound
	}
	if err != nil {
		return fmt.Errorf("detach provider %q from sandbox %q: %w", provider, sandbox, err)
	}
	return nil
}

// Bump moves the sandbox's credentials generation up by one and returns
// the new one (ErrNotFound).
func Bump(ctx context.Context, e sqlexec.Engine, sandbox string) (int64, error) {
	var gen int64
	found := false
	err := e.Rows(ctx, `UPDATE sandboxes SET credentials_generation = credentials_generation + 1 WHERE name = `+e.Param(1)+
		` RETURNING credentials_generation`, []any{sandbox}, func(scan func(...any) error) error {
		found = true
		return scan(&gen)
	})
	if err == nil && !found {
		err = store.ErrNotFound
	}
	if err != nil {
		return 0, fmt.Errorf("bump credentials generation of sandbox %q: %w", sandbox, err)
	}
	return gen, nil
}

// Writes are the writes of store.Tx on one engine, as the driver embeds
// them: the transaction's, or outside one the writer (SQLite) or pool
// (Postgres).
type Writes struct{ e sqlexec.Engine }

// WritesOn returns the writes on e.
func WritesOn(e sqlexec.Engine) Writes { return Writes{e} }

// InsertProvider stores p (ErrAlreadyExists for a taken name).
func (w Writes) InsertProvider(ctx context.Context, p store.Provider) error {
	return Insert(ctx, w.e, p)
}

// RotateProvider replaces the provider's secret if its revision is still
// previous (ErrConflict, ErrNotFound).
func (w Writes) RotateProvider(ctx context.Context, p store.Provider, previous int64) error {
	return Rotate(ctx, w.e, p, previous)
}

// DeleteProvider deletes the provider row (ErrNotFound; ErrInUse while a
// sandbox refers to it).
func (w Writes) DeleteProvider(ctx context.Context, name string) error { return Delete(ctx, w.e, name) }

// AttachProvider attaches provider to sandbox; false when it was.
func (w Writes) AttachProvider(ctx context.Context, sandbox, provider string, at time.Time, by string) (bool, error) {
	return Attach(ctx, w.e, sandbox, provider, at, by)
}

// DetachProvider detaches it (ErrNotFound when it is not attached).
func (w Writes) DetachProvider(ctx context.Context, sandbox, provider string) error {
	return Detach(ctx, w.e, sandbox, provider)
}

// BumpCredentialsGeneration moves the sandbox's generation up by one.
func (w Writes) BumpCredentialsGeneration(ctx context.Context, sandbox string) (int64, error) {
	return Bump(ctx, w.e, sandbox)
}
