package sqlite

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/portcullis-dev/portcullis/store"
)

// Input checks shared by the write methods. They mirror store/postgres's, so
// both engines refuse the same inputs before touching the database.

func checkToken(t store.Token) error {
	switch {
	case t.Name == "":
		return errors.New("invalid token: empty name")
	case t.Hash == "":
		return errors.New("invalid token: empty hash")
	}
	switch t.Role {
	case store.RoleAdmin, store.RoleOperator:
		if t.Sandbox != "" {
			return fmt.Errorf("invalid token: role %s cannot be scoped to a sandbox", t.Role)
		}
	case store.RoleSandbox:
		if t.Sandbox == "" {
			return errors.New("invalid token: role sandbox needs a sandbox")
		}
	default:
		return fmt.Errorf("invalid token: unknown role %q", t.Role)
	}
	return nil
}

// checkCreateSandbox validates in and fills in the token's role, sandbox
// and creator.
func checkCreateSandbox(in *store.CreateSandbox) error {
	if in.Name == "" {
		return errors.New("invalid sandbox: empty name")
	}
	in.Token.Role, in.Token.Sandbox = store.RoleSandbox, in.Name
	if in.Token.CreatedBy == "" {
		in.Token.CreatedBy = in.Actor
	}
	if err := checkToken(in.Token); err != nil {
		return err
	}
	if p := in.Policy; p != nil {
		if p.Hash == "" || len(p.Document) == 0 {
			return errors.New("invalid policy: empty hash or document")
		}
		if p.Source == "" {
			p.Source = store.SourceCreate
		}
	}
	return nil
}

// checkAppendPolicy validates in and defaults its source to "set".
func checkAppendPolicy(in *store.AppendPolicy) error {
	switch {
	case in.Sandbox == "":
		return errors.New("invalid policy: empty sandbox")
	case in.ExpectedVersion < 0:
		return fmt.Errorf("invalid policy: expected version %d", in.ExpectedVersion)
	case in.Hash == "" || len(in.Document) == 0:
		return errors.New("invalid policy: empty hash or document")
	}
	if in.Source == "" {
		in.Source = store.SourceSet
	}
	return nil
}

// encodeMap stores a string map as a JSON object ("{}" when empty).
func encodeMap(m map[string]string) ([]byte, error) {
	if len(m) == 0 {
		return []byte("{}"), nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode map: %w", err)
	}
	return b, nil
}

// decodeMap reads what encodeMap stored; an empty object reads as nil.
func decodeMap(b []byte) (map[string]string, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode map: %w", err)
	}
	if len(m) == 0 {
		return nil, nil
	}
	return m, nil
}

// cloneMap returns what a round trip through the database would: nil when
// empty, else a copy the caller cannot change under us.
func cloneMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}
