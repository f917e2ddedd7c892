package apiclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"connectrpc.com/connect/v2"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// AwaitEnforcement follows version of sandbox to the sandbox's proxies
// connected to the gateway (ProxyService.WatchEnforcement), and then to
// those of the fleet the watch did not count (connected to another
// replica, or seen within FleetGrace: fleet.go), until every one ACKed
// it, one NACKed it (last.GetNacked() > 0), or timeout passes (timedOut,
// with some still pending). It returns where the version stands last;
// err is a watch that failed, or a gateway that stopped following the
// version with proxies pending.
func (c *Client) AwaitEnforcement(ctx context.Context, sandbox string, version uint32, timeout time.Duration) (last *portcullisv1.Enforcement, timedOut bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := c.Enforcement.WatchEnforcement(ctx, &portcullisv1.WatchEnforcementRequest{Sandbox: sandbox, Version: version})
	if err != nil {
		return nil, false, err
	}
	defer st.Close()
	for {
		e, err := st.Receive()
		switch {
		case err == nil:
			last = e
			if e.GetNacked() > 0 {
				return last, false, nil
			}
			continue
		case errors.Is(err, io.EOF) && last != nil:
			if last.GetPending() > 0 {
				return last, false, fmt.Errorf("the gateway stopped following version %d with %d proxies pending", version, last.GetPending())
			}
			return c.awaitFleet(ctx, sandbox, version, last)
		case last != nil && (errors.Is(ctx.Err(), context.DeadlineExceeded) || connect.CodeOf(err) == connect.CodeDeadlineExceeded):
			// Ours, or the gateway's reading of it (Connect sends the
			// deadline along): some proxies are still pending.
			return last, true, nil
		}
		return last, false, err
	}
}
