package apiclient

import (
	"context"
	"io"
	"net/http"
	"strings"
	"time"
)

// Readiness is the gateway's answer to GET /readyz: whether its stores
// answer, and its clock.
type Readiness struct {
	// Ready: it answered 200 (its stores answer); else Status and Body
	// say what it answered ("503 Service Unavailable", "store
	// unreachable").
	Ready        bool
	Status, Body string
	// Date is the answer's Date header, the gateway's clock to the second
	// (zero when absent); Sent and Received bound, on this host's clock,
	// when it was read.
	Date, Sent, Received time.Time
}

// Ready asks the gateway whether it is ready (GET /readyz, no token). An
// error is a gateway that did not answer at all.
func (c *Client) Ready(ctx context.Context) (Readiness, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/readyz", nil)
	if err != nil {
		return Readiness{}, err
	}
	// Not through gatewayCheck: a plain-text answer here is a gateway's.
	hc := &http.Client{Transport: c.check.next, Timeout: c.http.Timeout}
	r := Readiness{Sent: time.Now()}
	res, err := hc.Do(req)
	if err != nil {
		return Readiness{}, err
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(res.Body, 4<<10))
	r.Received = time.Now()
	r.Ready = res.StatusCode == http.StatusOK
	r.Status, r.Body = res.Status, strings.TrimSpace(string(body))
	if d, err := http.ParseTime(res.Header.Get("Date")); err == nil {
		r.Date = d
	}
	return r, nil
}
