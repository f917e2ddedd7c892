package postgres

import (
	"context"
	"errors"

	"github.com/portcullis-dev/portcullis/store"
)

// Placeholders until the advisor schema lands (being written now).

var errTODO = errors.New("postgres: advisor storage not implemented yet")

func (s *Store) SetSandboxBoundary(ctx context.Context, sandbox string, doc []byte, hash, actor string) (store.Sandbox, error) {
	return store.Sandbox{}, errTODO
}

func (s *Store) UpdateCredentialedHosts(ctx context.Context, sandbox string, add, remove []string, actor string) (store.Sandbox, error) {
	return store.Sandbox{}, errTODO
}

func (s *Store) CreateProposal(ctx context.Context, in store.NewProposal, actor string) (store.Proposal, bool, error) {
	return store.Proposal{}, false, errTODO
}

func (s *Store) GetProposal(ctx context.Context, id int64) (store.Proposal, error) {
	return store.Proposal{}, errTODO
}

func (s *Store) ListProposals(ctx context.Context, f store.ProposalFilter) ([]store.Proposal, error) {
	return nil, errTODO
}

func (s *Store) SetProposalStatus(ctx context.Context, id int64, from []string, status, reason, actor string) (store.Proposal, error) {
	return store.Proposal{}, errTODO
}

func (s *Store) RebaseProposal(ctx context.Context, in store.Rebase) (store.Proposal, error) {
	return store.Proposal{}, errTODO
}
