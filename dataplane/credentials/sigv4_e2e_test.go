package credentials_test

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strings"
	"testing"
)

// The proxy signs with SigV4 what an agent sends with placeholder AWS
// credentials; the upstream checks the signature with the independent
// verifier.
func TestSigV4ThroughProxy(t *testing.T) {
	e := newEnv(t)
	e.agent.Credentials().SetCredentials(e.bundle())
	agentAuth := "AWS4-HMAC-SHA256 Credential=portcullis:provider:aw/20260101/us-east-1/bedrock/aws4_request, SignedHeaders=host;x-amz-date, Signature=0123"
	body := `{"prompt":"hello"}`
	sum := sha256.Sum256([]byte(body))
	bodyHash := hex.EncodeToString(sum[:])

	for _, tc := range []struct {
		name, url, method, body string
		header                  http.Header
		up                      *recorder
		s3                      bool
		region, service, hash   string
	}{
		{"sigv4, body hash from the agent, through TLS", e.url("bedrock.example.com", true, "/model/anthropic.claude-v2%3A1/invoke"), "POST", body,
			http.Header{"Authorization": {agentAuth}, "X-Amz-Date": {"20260101T000000Z"}, "X-Amz-Content-Sha256": {bodyHash}, "X-Amz-Security-Token": {"placeholder"}, "Content-Type": {"application/json"}},
			e.https, false, "us-east-1", "bedrock", bodyHash},
		{"sigv4, no agent signature", e.url("bedrock.example.com", true, "/model/m/invoke"), "POST", body, http.Header{"Content-Type": {"application/json"}},
			e.https, false, "us-east-1", "bedrock", bodyHash},
		{"sigv4:no_body, the region from the host", e.url("s3.us-west-2.example.com", false, "/bucket/my%20key"), "PUT", "object data", http.Header{"X-Amz-Content-Sha256": {bodyHash}},
			e.plain, true, "us-west-2", "s3", "UNSIGNED-PAYLOAD"},
		{"sigv4:body, a query", e.url("signed.example.com", false, "/?Action=GetCallerIdentity&Version=2011-06-15"), "POST", body, nil,
			e.plain, false, "eu-west-1", "sts", bodyHash},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, res := e.do(t, tc.method, tc.url, tc.header, tc.body)
			if status != 200 {
				t.Fatalf("%d %v", status, res)
			}
			got := one(t, tc.up)
			a, err := verifyRequest(got.req, awsSecret, tc.s3)
			if err != nil {
				t.Fatalf("the upstream's verifier: %v", err)
			}
			if a.accessKey != awsKeyID || a.region != tc.region || a.service != tc.service {
				t.Errorf("signed by %s for %s/%s, want the provider's key for %s/%s", a.accessKey, a.region, a.service, tc.region, tc.service)
			}
			if h := got.req.Header.Get("X-Amz-Content-Sha256"); h != tc.hash {
				t.Errorf("X-Amz-Content-Sha256 %q, want %q", h, tc.hash)
			}
			if tok := got.req.Header.Values("X-Amz-Security-Token"); len(tok) != 1 || tok[0] != awsToken {
				t.Errorf("X-Amz-Security-Token %q, want the provider's session token", tok)
			}
			if !strings.Contains(strings.Join(a.signed, ";"), "x-amz-security-token") {
				t.Errorf("signed headers %v leave out the session token", a.signed)
			}
			if got.body != tc.body {
				t.Errorf("upstream body %q, want %q", got.body, tc.body)
			}
		})
	}

	status, res := e.do(t, "PUT", e.url("signed.example.com", false, "/big"), nil, strings.Repeat("b", 10<<20+1))
	e.refused(t, status, res, "/big", "credential_unavailable", "10485760 bytes")
	status, res = e.do(t, "PUT", e.url("bedrock.example.com", true, "/chunked"), http.Header{"X-Amz-Content-Sha256": {"STREAMING-AWS4-HMAC-SHA256-PAYLOAD"}}, "x")
	e.refused(t, status, res, "/chunked", "credential_unavailable", "sigv4:no_body")
	status, res = e.do(t, "GET", e.url("bedrock.example.com", true, "/other-key"), http.Header{"Authorization": {strings.Replace(agentAuth, "portcullis:provider:aw", "portcullis:provider:gh", 1)}}, "")
	e.refused(t, status, res, "/other-key", "credential_placeholder", `provider "gh"`)
}
