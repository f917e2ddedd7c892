package apiclient

import (
	"context"
	"errors"
	"io"

	"connectrpc.com/connect/v2"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// TailDecisions hands each record of a TailDecisions stream to each (the
// newest req.Backlog first, then every new one as the gateway stores it)
// until ctx ends, which is the caller stopping the tail and no error, or
// the stream does: an Unavailable error when the gateway ends it. An error
// of each ends the tail with it.
func (c *Client) TailDecisions(ctx context.Context, req *portcullisv1.TailDecisionsRequest, each func(*portcullisv1.StoredDecision) error) error {
	st, err := c.Stream.TailDecisions(ctx, req)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Close()
	for {
		d, err := st.Receive()
		switch {
		case ctx.Err() != nil:
			return nil // stopped: the normal end of a tail
		case errors.Is(err, io.EOF):
			return connect.NewError(connect.CodeUnavailable, "the gateway ended the tail (shutting down?)")
		case err != nil:
			return err
		}
		if err := each(d); err != nil {
			return err
		}
	}
}
