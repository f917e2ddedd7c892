package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// slowloris measures a legitimate batch's latency (one source, 10
// events) with no other traffic, then beside n connections of another
// source that each send a batch's headers and then a byte a second.
// The legitimate client gives up after 15s.
func slowloris(ctx context.Context, bin string, n, rounds int) error {
	g, err := start(ctx, bin)
	if err != nil {
		return err
	}
	defer g.stop()
	token := func(source string) (string, error) {
		t, err := g.tokens.CreateToken(g.admin(ctx), &portcullisv1.CreateTokenRequest{Name: source, Role: "sentry"})
		return t.GetToken(), err
	}
	slowTok, err := token("sentry://slow")
	if err != nil {
		return err
	}
	legitTok, err := token("sentry://legit")
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 15 * time.Second}
	seq := uint64(0)
	batch := func() (time.Duration, string) {
		var evs []json.RawMessage
		for range 10 {
			seq++
			evs = append(evs, cloudEventJSON(&portcullisv1.SentryEvent{
				Specversion: "1.0", Id: fmt.Sprint("l", seq), Source: "sentry://legit", Type: "portcullis.sentry.v1.heartbeat",
				Time: timestamppb.Now(), Sequence: seq, Data: heartbeatData(),
			}))
		}
		body, _ := json.Marshal(evs)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.addr+"/v1/sentry/events", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/cloudevents-batch+json")
		req.Header.Set("Authorization", "Bearer "+legitTok)
		t0 := time.Now()
		res, err := client.Do(req)
		d := time.Since(t0)
		if err != nil {
			return d, "error: " + err.Error()
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return d, res.Status
	}
	report := func(label string) {
		for i := range rounds {
			d, status := batch()
			fmt.Printf("%-28s round %d: %8.1f ms  %s\n", label, i+1, float64(d.Microseconds())/1000, status)
		}
	}
	report("no slow connections")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		c, err := net.Dial("tcp", g.addr)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		fmt.Fprintf(c, "POST /v1/sentry/events HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/cloudevents-batch+json\r\nContent-Length: 1000000\r\n\r\n[", g.addr, slowTok)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for _, c := range conns {
					c.Write([]byte(" "))
				}
			}
		}
	}()
	defer func() { close(stop); <-done }()
	// Let the slow requests reach the handler.
	time.Sleep(500 * time.Millisecond)
	report(fmt.Sprintf("beside %d slow connections", n))
	return nil
}

func heartbeatData() *structpb.Struct {
	st, err := structpb.NewStruct(map[string]any{"severity": "info"})
	if err != nil {
		panic(err)
	}
	return st
}
