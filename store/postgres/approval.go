package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/portcullis-dev/portcullis/store"
)

// Placeholders until the approval schema lands (being written now).

var errTODO = errors.New("postgres: approval storage not implemented yet")

func (s *Store) AddApproval(ctx context.Context, id int64, a store.Approval) (store.Proposal, error) {
	return store.Proposal{}, errTODO
}

func (s *Store) ApplyProposal(ctx context.Context, in store.ApplyProposal) (store.Proposal, store.PolicyVersion, error) {
	return store.Proposal{}, store.PolicyVersion{}, errTODO
}

func (s *Store) ExpireProposals(ctx context.Context, now time.Time, actor string) ([]store.Proposal, error) {
	return nil, errTODO
}

func (s *Store) FreezeSandbox(ctx context.Context, sandbox, reason, actor string, doc []byte, hash string) (store.Sandbox, store.PolicyVersion, error) {
	return store.Sandbox{}, store.PolicyVersion{}, errTODO
}

func (s *Store) UnfreezeSandbox(ctx context.Context, sandbox, reason, actor string) (store.Sandbox, store.PolicyVersion, error) {
	return store.Sandbox{}, store.PolicyVersion{}, errTODO
}

func (s *Store) GetApprovalPolicy(ctx context.Context) (store.ApprovalPolicy, error) {
	return store.ApprovalPolicy{}, errTODO
}

func (s *Store) SetApprovalPolicy(ctx context.Context, module, hash, actor string) (store.ApprovalPolicy, error) {
	return store.ApprovalPolicy{}, errTODO
}
