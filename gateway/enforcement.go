package gateway

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"connectrpc.com/connect/v2"

	"github.com/portcullis-dev/portcullis/gateway/distribution"
	"github.com/portcullis-dev/portcullis/gateway/transport"
	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
	"github.com/portcullis-dev/portcullis/proto/portcullis/v1/portcullisv1connect"
	"github.com/portcullis-dev/portcullis/store"
)

// Enforcement: which connected proxies ACKed or NACKed a committed version
// (distribution.WatchEnforcement), streamed to the CLI's --wait and the
// console by ProxyService.WatchEnforcement, and to the sandbox by
// WatchProposal once its proposal is applied. "Connected" means connected
// to this replica: a proxy of another replica is not counted.

// WatchEnforcement streams where a committed version stands with the
// sandbox's proxies connected to this replica, until none is pending.
func (s proxyService) WatchEnforcement(ctx context.Context, req *portcullisv1.WatchEnforcementRequest, stream portcullisv1connect.ProxyServiceWatchEnforcementServerStream) error {
	version := int64(req.GetVersion())
	if version < 1 {
		return invalidField("version", "is required (a committed version, 1 or more)")
	}
	sb, err := transport.OffStack(func() (store.Sandbox, error) { return s.store.GetSandbox(ctx, req.GetSandbox()) })
	if err != nil {
		return missing(err, "sandbox %q not found", req.GetSandbox())
	}
	if version > sb.CurrentVersion {
		return missing(store.ErrNotFound, "sandbox %q has no version %d (its current version is %d)", sb.Name, version, sb.CurrentVersion)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(s.streams, cancel)()
	err = s.dist.WatchEnforcement(ctx, sb.Name, version, func(e distribution.Enforcement) error {
		return stream.Send(enforcementToProto(e))
	})
	switch {
	case s.streams.Err() != nil:
		return connect.NewError(connect.CodeUnavailable, "the gateway is shutting down; watch again")
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		// The client's deadline passed with proxies pending: an error,
		// so that it is not read as a settled end.
		return connect.NewError(connect.CodeDeadlineExceeded, fmt.Sprintf("version %d: proxies still pending at the deadline", version))
	case ctx.Err() != nil:
		return nil // the client left
	}
	return err
}

// enforcementWatchMax bounds how long WatchProposal follows an applied
// proposal to its proxies: a proxy that neither answers nor goes would
// otherwise hold the stream.
const enforcementWatchMax = 30 * time.Second

// watchEnforcement streams p again with the enforcement of its applied
// version after every change, until none is pending, ctx ends or
// enforcementWatchMax passes.
func (s advisorService) watchEnforcement(ctx context.Context, p *portcullisv1.Proposal, send func(*portcullisv1.Proposal) error) error {
	ctx, cancel := context.WithTimeout(ctx, enforcementWatchMax)
	defer cancel()
	defer context.AfterFunc(s.streams, cancel)()
	err := s.dist.WatchEnforcement(ctx, p.GetSandbox(), int64(p.GetAppliedVersion()), func(e distribution.Enforcement) error {
		p.Enforcement = enforcementToProto(e)
		return send(p)
	})
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func enforcementToProto(e distribution.Enforcement) *portcullisv1.Enforcement {
	out := &portcullisv1.Enforcement{
		Sandbox: e.Sandbox,
		Version: uint32(e.Version),
		Acked:   uint32(e.Count(distribution.Acked)),
		Nacked:  uint32(e.Count(distribution.Nacked)),
		Pending: uint32(e.Count(distribution.Pending)),
		Total:   uint32(len(e.Proxies)),
		Ms:      millis(e.Took()),
		Proxies: make([]*portcullisv1.ProxyEnforcement, 0, len(e.Proxies)),
	}
	for _, p := range e.Proxies {
		out.Proxies = append(out.Proxies, &portcullisv1.ProxyEnforcement{
			ProxyId:        p.ProxyID,
			State:          string(p.State),
			Error:          p.Error,
			Ms:             millis(p.Took),
			AppliedVersion: uint32(p.AppliedVersion),
		})
	}
	return out
}

// millis is d in whole milliseconds, clamped to uint32.
func millis(d time.Duration) uint32 {
	return uint32(min(max(d.Milliseconds(), 0), math.MaxUint32))
}
