package credentials

import (
	"crypto/sha256"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/aws/smithy-go/aws-http-auth/credentials"
	"github.com/aws/smithy-go/aws-http-auth/sigv4"
	v4 "github.com/aws/smithy-go/aws-http-auth/v4"

	"github.com/portcullis-dev/portcullis/provider"
)

// unsignedPayload is the payload hash of a signature without the body.
const unsignedPayload = "UNSIGNED-PAYLOAD"

// signing is a SigV4 signature to make.
type signing struct {
	creds            credentials.Credentials
	service, region  string
	payload          string // unsignedPayload, or "": the body's hash is signed
	doubleEscapePath bool
}

// awsSignatureHeaders are the agent's own signature's headers, removed
// before the proxy signs.
var awsSignatureHeaders = []string{"Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-Sha256"}

// signsBody reports whether mode (an endpoint's credential_signing) signs
// r's body (OpenShell's modes; see the package doc).
func signsBody(mode string, r *http.Request) bool {
	switch mode {
	case "sigv4:body":
		return true
	case "sigv4":
		switch h := r.Header.Get("X-Amz-Content-Sha256"); {
		case strings.EqualFold(h, unsignedPayload), strings.HasPrefix(strings.ToUpper(h), "STREAMING-"):
			return false
		case h != "":
			return true
		}
		return r.ContentLength >= 0 && len(r.TransferEncoding) == 0
	}
	return false
}

func newSigning(r *http.Request, in Request, p provider.Provider, body []byte) (*signing, *Denial) {
	ep := in.Endpoint
	s := &signing{
		creds: credentials.Credentials{
			AccessKeyID:     p.Secret[provider.FieldAccessKeyID],
			SecretAccessKey: p.Secret[provider.FieldSecretAccessKey],
			SessionToken:    p.Secret[provider.FieldSessionToken],
		},
		service: ep.SigningService,
		region:  ep.SigningRegion,
		// S3 signs the path as sent; every other service escapes it again.
		doubleEscapePath: ep.SigningService != "s3",
	}
	if s.region == "" {
		if s.region = regionOf(in.Host); s.region == "" {
			return nil, deny(CodeUnavailable, "no AWS region for %s: set the endpoint's signing_region", in.Host)
		}
	}
	agent := r.Header.Get("X-Amz-Content-Sha256")
	switch {
	case ep.CredentialSigning == "sigv4:no_body":
		s.payload = unsignedPayload
	case ep.CredentialSigning == "sigv4:body" || signsBody(ep.CredentialSigning, r):
		if body == nil && r.ContentLength != 0 {
			return nil, deny(CodeUnavailable, "the request body could not be read to sign it")
		}
	case strings.HasPrefix(strings.ToUpper(agent), "STREAMING-"):
		// OpenShell signs STREAMING-UNSIGNED-PAYLOAD-TRAILER as sent;
		// the signer here knows only UNSIGNED-PAYLOAD.
		return nil, deny(CodeUnavailable, "X-Amz-Content-Sha256 %s is a streaming payload the proxy cannot sign: use credential_signing: sigv4:no_body", cut(agent, 64))
	default:
		s.payload = unsignedPayload
	}
	return s, nil
}

// apply signs out at now: the agent's signature headers removed first.
func (s *signing) apply(out *http.Request, body []byte, now time.Time) {
	for _, h := range awsSignatureHeaders {
		out.Header.Del(h)
	}
	hash := []byte(s.payload)
	if s.payload == "" {
		sum := sha256.Sum256(body)
		hash = sum[:]
	}
	if err := sign(out, s.creds, s.service, s.region, hash, now, proxySigned{}, s.doubleEscapePath, true); err != nil {
		// Unreachable: it fails only hashing a body itself, and the hash
		// is given. Unsigned, the request carries no credential.
		out.Header.Del("Authorization")
	}
	// The signer writes Host into the header map; the request line's
	// authority (out.Host) is what goes, once.
	out.Header.Del("Host")
}

// sign signs req with the SigV4 signer (aws-http-auth): hash is the
// payload's SHA-256 or UNSIGNED-PAYLOAD (sent as X-Amz-Content-Sha256
// too when hashHeader); rules pick the headers signed; doubleEscapePath
// escapes the path once more (every service but S3).
func sign(req *http.Request, creds credentials.Credentials, service, region string, hash []byte, now time.Time, rules v4.SignedHeaderRules, doubleEscapePath, hashHeader bool) error {
	signer := sigv4.New(func(o *v4.SignerOptions) {
		o.HeaderRules = rules
		o.AddPayloadHashHeader = hashHeader
		o.DisableDoublePathEscape = !doubleEscapePath
	})
	return signer.SignRequest(&sigv4.SignRequestInput{
		Request: req, PayloadHash: hash, Credentials: creds,
		Service: service, Region: region, Time: now,
	})
}

// proxySigned are the headers the proxy signs: those it never changes
// after signing (not traceparent, which it sets on the way out).
type proxySigned struct{}

func (proxySigned) IsSigned(h string) bool {
	return h == "host" || h == "content-type" || h == "content-md5" || strings.HasPrefix(h, "x-amz-")
}

var regionRE = regexp.MustCompile(`^(us|eu|ap|sa|ca|me|af|il|mx|cn|us-gov|us-iso|us-isob)-[a-z]+-[0-9]+$`)

// regionOf finds the AWS region in an AWS host name: the label that
// looks like one (bedrock-runtime.us-east-1.amazonaws.com,
// bucket.s3.dualstack.eu-west-2.amazonaws.com), "" if none does.
func regionOf(host string) string {
	for label := range strings.SplitSeq(host, ".") {
		if regionRE.MatchString(label) {
			return label
		}
	}
	return ""
}

// cut shortens s to n bytes for a message.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
