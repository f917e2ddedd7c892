package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// approvers is how many operator tokens approve: one approves each
// proposal; the others approve it again when a re-base left it pending.
const approvers = 4

// setup creates the approvers' operator tokens and the sandboxes (every
// one with the base policy as version 1), keeping each sandbox's token.
func (w *workload) setup(ctx context.Context, sandboxes int, logw io.Writer) error {
	start := time.Now()
	for i := range approvers {
		var tok *portcullisv1.CreateTokenResponse
		if _, err := w.fc.do(ctx, w.admin, func(ctx context.Context, conn *grpc.ClientConn) error {
			var err error
			tok, err = portcullisv1.NewTokenServiceClient(conn).CreateToken(ctx, &portcullisv1.CreateTokenRequest{Name: fmt.Sprintf("fleetload-approver-%d", i), Role: "operator"})
			return err
		}); err != nil {
			return fmt.Errorf("create an approver's token: %w", err)
		}
		w.approvers = append(w.approvers, tok.GetToken())
	}
	w.names = make([]string, sandboxes)
	tokens := make([]string, sandboxes)
	errs := make([]error, sandboxes)
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range sandboxes {
		w.names[i] = fmt.Sprintf("sb-%04d", i)
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, errs[i] = w.fc.do(ctx, w.admin, func(ctx context.Context, conn *grpc.ClientConn) error {
				res, err := portcullisv1.NewSandboxServiceClient(conn).CreateSandbox(ctx, &portcullisv1.CreateSandboxRequest{Name: w.names[i], Policy: policyVariant(0)})
				tokens[i] = res.GetToken()
				return err
			})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("create sandboxes: %w", err)
	}
	for i, name := range w.names {
		w.tokens[name] = tokens[i]
	}
	fmt.Fprintf(logw, "%d sandboxes created in %s\n", sandboxes, time.Since(start).Round(time.Millisecond))
	return nil
}

// versionInfo is one stored policy version as the history shows it.
type versionInfo struct {
	Hash     string
	Source   string // create, set, proposal, …
	Proposal string // provenance: the proposal it applied
	Created  time.Time
}

type proposalInfo struct {
	Sandbox string
	Status  string
	Applied uint32
}

// history is what the store holds after the run, read through the
// replicas.
type history struct {
	versions  map[string]map[uint32]versionInfo // sandbox → version
	proposals map[uint64]proposalInfo
	audit     *portcullisv1.VerifyAuditResponse
}

// currentAt is the sandbox's version current at t: the newest committed
// at or before t (0 if none).
func (h *history) currentAt(sandbox string, t time.Time) uint32 {
	var cur uint32
	for v, info := range h.versions[sandbox] {
		if !info.Created.After(t) && v > cur {
			cur = v
		}
	}
	return cur
}

// readBack reads every sandbox's versions and proposals, and verifies the
// audit chain.
func (w *workload) readBack(ctx context.Context, fleet int) (*history, error) {
	h := &history{versions: map[string]map[uint32]versionInfo{}, proposals: map[uint64]proposalInfo{}}
	var mu sync.Mutex
	errs := make([]error, len(w.names))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, sb := range w.names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			var vs *portcullisv1.ListPolicyVersionsResponse
			var ps *portcullisv1.ListProposalsResponse
			_, err := w.fc.do(ctx, w.admin, func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				vs, err = portcullisv1.NewPolicyServiceClient(conn).ListPolicyVersions(ctx, &portcullisv1.ListPolicyVersionsRequest{Sandbox: sb})
				return err
			})
			if err != nil {
				errs[i] = fmt.Errorf("versions of %s: %w", sb, err)
				return
			}
			_, err = w.fc.do(ctx, w.admin, func(ctx context.Context, conn *grpc.ClientConn) error {
				var err error
				ps, err = portcullisv1.NewApprovalServiceClient(conn).ListProposals(ctx, &portcullisv1.ApprovalServiceListProposalsRequest{Sandbox: sb, Limit: 1000})
				return err
			})
			if err != nil {
				errs[i] = fmt.Errorf("proposals of %s: %w", sb, err)
				return
			}
			if len(ps.GetProposals()) == 1000 {
				errs[i] = fmt.Errorf("proposals of %s: 1000 or more, more than one page", sb)
				return
			}
			m := map[uint32]versionInfo{}
			for _, v := range vs.GetVersions() {
				m[v.GetVersion()] = versionInfo{Hash: v.GetHash(), Source: v.GetSource(), Proposal: v.GetProvenance()["proposal"], Created: v.GetCreatedAt().AsTime()}
			}
			mu.Lock()
			defer mu.Unlock()
			h.versions[sb] = m
			for _, p := range ps.GetProposals() {
				h.proposals[p.GetId()] = proposalInfo{Sandbox: p.GetSandbox(), Status: p.GetStatus(), Applied: p.GetAppliedVersion()}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if _, err := w.fc.do(ctx, w.admin, func(ctx context.Context, conn *grpc.ClientConn) error {
		var err error
		h.audit, err = portcullisv1.NewAuditServiceClient(conn).VerifyAudit(ctx, &portcullisv1.VerifyAuditRequest{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("verify the audit chain: %w", err)
	}
	return h, nil
}

// found says whether what acknowledged operation r said was stored is in
// the history, and if not, why.
func (h *history) found(r opResult) (bool, string) {
	switch r.Kind {
	case opSet:
		v, ok := h.versions[r.Sandbox][r.Version]
		switch {
		case !ok:
			return false, fmt.Sprintf("set of %s: version %d is not in the history", r.Sandbox, r.Version)
		case v.Hash != r.Hash:
			return false, fmt.Sprintf("set of %s: version %d has hash %.12s, the answer said %.12s", r.Sandbox, r.Version, v.Hash, r.Hash)
		}
	case opPropose:
		p, ok := h.proposals[r.Proposal]
		if !ok || p.Sandbox != r.Sandbox {
			return false, fmt.Sprintf("proposal %d of %s is not stored", r.Proposal, r.Sandbox)
		}
	case opApprove:
		p, ok := h.proposals[r.Proposal]
		if !ok || p.Status != "applied" || p.Applied != r.Version {
			return false, fmt.Sprintf("proposal %d of %s: %+v, the approval said applied as version %d", r.Proposal, r.Sandbox, p, r.Version)
		}
		v, ok := h.versions[r.Sandbox][r.Version]
		switch {
		case !ok:
			return false, fmt.Sprintf("proposal %d of %s: version %d is not in the history", r.Proposal, r.Sandbox, r.Version)
		case v.Hash != r.Hash || v.Proposal != fmt.Sprint(r.Proposal):
			return false, fmt.Sprintf("proposal %d of %s: version %d is %+v, the approval said hash %.12s", r.Proposal, r.Sandbox, r.Version, v, r.Hash)
		}
	}
	return true, ""
}

// writeTimeline writes what the run recorded to path, for -timeline.
func writeTimeline(path string, t0 time.Time, kills []kill, ops []opResult, proxies []proxyLog, h *history) error {
	type version struct {
		Sandbox string `json:"sandbox"`
		Version uint32 `json:"version"`
		versionInfo
	}
	var versions []version
	for sb, vs := range h.versions {
		for v, info := range vs {
			versions = append(versions, version{sb, v, info})
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	err = json.NewEncoder(f).Encode(map[string]any{"t0": t0, "kills": kills, "ops": ops, "proxies": proxies, "versions": versions})
	return errors.Join(err, f.Close())
}
