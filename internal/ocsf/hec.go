package ocsf

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// HEC is a sink to a Splunk HTTP Event Collector: each batch is one POST
// of the collector's JSON envelopes, one after another ({"time":…,
// "source":"portcullis","sourcetype":"ocsf","event":{…}}), with the
// header "Authorization: Splunk TOKEN". Anything but a 2xx answer fails
// the batch.
type HEC struct {
	url    string
	token  string
	host   string
	client *http.Client
}

// NewHEC returns a sink posting to url (the collector's event endpoint,
// e.g. https://splunk:8088/services/collector/event) with token. A nil
// client means one with a 10s timeout.
func NewHEC(url, token string, client *http.Client) *HEC {
	if client == nil {
		client = &http.Client{Timeout: 10 * time.Second}
	}
	host, _ := os.Hostname()
	return &HEC{url: url, token: strings.TrimSpace(token), host: host, client: client}
}

// Name returns the collector's URL.
func (h *HEC) Name() string { return "hec:" + h.url }

type hecEnvelope struct {
	Time       float64         `json:"time"`
	Host       string          `json:"host,omitempty"`
	Source     string          `json:"source"`
	Sourcetype string          `json:"sourcetype"`
	Event      json.RawMessage `json:"event"`
}

// Write posts events in one request.
func (h *HEC) Write(ctx context.Context, events [][]byte) error {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	for _, ev := range events {
		var t struct {
			Time int64 `json:"time"`
		}
		_ = json.Unmarshal(ev, &t)
		if err := enc.Encode(hecEnvelope{Time: float64(t.Time) / 1000, Host: h.host, Source: "portcullis", Sourcetype: "ocsf", Event: ev}); err != nil {
			return err
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, &body)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Splunk "+h.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("collector answered %s: %s", resp.Status, bytes.TrimSpace(msg))
	}
	return nil
}

// Close releases idle connections.
func (h *HEC) Close() error {
	h.client.CloseIdleConnections()
	return nil
}
