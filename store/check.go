package store

import (
	"errors"
	"fmt"
)

// Input checks every engine runs before it touches the database, so both
// refuse the same inputs with the same messages. They are plain errors,
// not sentinels: the caller sent something the schema cannot hold.

// Check reports whether t can be stored: a name, a hash and a known role,
// with a sandbox exactly when the role is sandbox.
func (t Token) Check() error {
	switch {
	case t.Name == "":
		return errors.New("invalid token: empty name")
	case t.Hash == "":
		return errors.New("invalid token: empty hash")
	}
	switch t.Role {
	case RoleAdmin, RoleOperator:
		if t.Sandbox != "" {
			return fmt.Errorf("invalid token: role %s cannot be scoped to a sandbox", t.Role)
		}
	case RoleSandbox:
		if t.Sandbox == "" {
			return errors.New("invalid token: role sandbox needs a sandbox")
		}
	default:
		return fmt.Errorf("invalid token: unknown role %q", t.Role)
	}
	return nil
}

// Prepare checks in and fills in what the store derives: the token's role,
// sandbox and creator, and the policy's default source. The policy is
// copied first, so the caller's PolicyVersion is never changed.
func (in *CreateSandbox) Prepare() error {
	if in.Name == "" {
		return errors.New("invalid sandbox: empty name")
	}
	in.Token.Role, in.Token.Sandbox = RoleSandbox, in.Name
	if in.Token.CreatedBy == "" {
		in.Token.CreatedBy = in.Actor
	}
	if err := in.Token.Check(); err != nil {
		return err
	}
	if in.Policy != nil {
		p := *in.Policy
		if p.Hash == "" || len(p.Document) == 0 {
			return errors.New("invalid policy: empty hash or document")
		}
		if p.Source == "" {
			p.Source = SourceCreate
		}
		in.Policy = &p
	}
	return nil
}

// Prepare checks in and defaults its source to "set".
func (in *AppendPolicy) Prepare() error {
	switch {
	case in.Sandbox == "":
		return errors.New("invalid policy: empty sandbox")
	case in.ExpectedVersion < 0:
		return fmt.Errorf("invalid policy: expected version %d", in.ExpectedVersion)
	case in.Hash == "" || len(in.Document) == 0:
		return errors.New("invalid policy: empty hash or document")
	}
	if in.Source == "" {
		in.Source = SourceSet
	}
	return nil
}
