package credentials_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"
)

// An independent SigV4 verifier, written from AWS's specification
// (https://docs.aws.amazon.com/IAM/latest/UserGuide/create-signed-request.html),
// sharing nothing with the signer the proxy uses: the canonical request,
// the string to sign, the derived key and the HMAC.

// v4Input is what a signature covers.
type v4Input struct {
	method string
	// path is URI-encoded once for the canonical request, unless asIs:
	// the decoded path (normalized when the case says so), or a request's
	// path as it went on the wire, which services other than S3 encode
	// once more (the spec's "twice", the first being the client's) and S3
	// takes as it is.
	path        string
	query       url.Values
	header      http.Header // with Host among them
	signed      []string    // lower-case names, sorted
	payloadHash string
	time        time.Time
	region, svc string
	asIs        bool
}

// specEncode is the specification's UriEncode: every byte but the
// unreserved ones percent-encoded, upper-case hex; '/' kept when path.
func specEncode(s string, path bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' || path && c == '/' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

func (in v4Input) canonicalRequest() string {
	uri := in.path
	if !in.asIs {
		uri = specEncode(in.path, true)
	}
	if uri == "" {
		uri = "/"
	}
	var kvs [][2]string
	for k, vv := range in.query {
		for _, v := range vv {
			kvs = append(kvs, [2]string{specEncode(k, false), specEncode(v, false)})
		}
	}
	// By name, then value, after encoding, as the spec says.
	sort.Slice(kvs, func(i, j int) bool { return kvs[i][0] < kvs[j][0] || kvs[i][0] == kvs[j][0] && kvs[i][1] < kvs[j][1] })
	pairs := make([]string, len(kvs))
	for i, kv := range kvs {
		pairs[i] = kv[0] + "=" + kv[1]
	}
	var headers strings.Builder
	for _, name := range in.signed {
		vals := in.header.Values(name)
		if name == "host" && len(vals) == 0 {
			vals = []string{in.header.Get("Host")}
		}
		trimmed := make([]string, len(vals))
		for i, v := range vals {
			trimmed[i] = strings.Join(strings.Fields(v), " ") // trim, and sequential spaces to one
		}
		headers.WriteString(name + ":" + strings.Join(trimmed, ",") + "\n")
	}
	return strings.Join([]string{in.method, uri, strings.Join(pairs, "&"), headers.String(), strings.Join(in.signed, ";"), in.payloadHash}, "\n")
}

func (in v4Input) scope() string {
	return in.time.UTC().Format("20060102") + "/" + in.region + "/" + in.svc + "/aws4_request"
}

func (in v4Input) stringToSign() string {
	sum := sha256.Sum256([]byte(in.canonicalRequest()))
	return "AWS4-HMAC-SHA256\n" + in.time.UTC().Format("20060102T150405Z") + "\n" + in.scope() + "\n" + hex.EncodeToString(sum[:])
}

func hmacOf(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}

// signature is the hex HMAC of the string to sign with the derived key.
func (in v4Input) signature(secret string) string {
	k := hmacOf([]byte("AWS4"+secret), in.time.UTC().Format("20060102"))
	k = hmacOf(k, in.region)
	k = hmacOf(k, in.svc)
	k = hmacOf(k, "aws4_request")
	return hex.EncodeToString(hmacOf(k, in.stringToSign()))
}

// parsedAuth is an Authorization header's parts.
type parsedAuth struct {
	accessKey, date, region, service string
	signed                           []string
	signature                        string
}

func parseAuthorization(v string) (parsedAuth, error) {
	var a parsedAuth
	alg, rest, ok := strings.Cut(v, " ")
	if !ok || alg != "AWS4-HMAC-SHA256" {
		return a, fmt.Errorf("not a SigV4 Authorization: %q", v)
	}
	for part := range strings.SplitSeq(rest, ",") {
		k, val, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "Credential":
			f := strings.Split(val, "/")
			if len(f) != 5 || f[4] != "aws4_request" {
				return a, fmt.Errorf("bad credential scope %q", val)
			}
			a.accessKey, a.date, a.region, a.service = f[0], f[1], f[2], f[3]
		case "SignedHeaders":
			a.signed = strings.Split(val, ";")
		case "Signature":
			a.signature = val
		}
	}
	if a.accessKey == "" || a.signature == "" || len(a.signed) == 0 {
		return a, fmt.Errorf("incomplete Authorization %q", v)
	}
	return a, nil
}

// verifyRequest checks r, as a server received it, against secret: the
// signature its Authorization carries is the one the spec computes. s3:
// the path is signed as it went on the wire.
func verifyRequest(r *http.Request, secret string, s3 bool) (parsedAuth, error) {
	a, err := parseAuthorization(r.Header.Get("Authorization"))
	if err != nil {
		return a, err
	}
	tm, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return a, fmt.Errorf("X-Amz-Date: %v", err)
	}
	wire, _, _ := strings.Cut(r.RequestURI, "?")
	h := r.Header.Clone()
	h.Set("Host", r.Host)
	if r.ContentLength >= 0 && h.Get("Content-Length") == "" {
		h.Set("Content-Length", fmt.Sprint(r.ContentLength))
	}
	in := v4Input{
		method: r.Method, path: wire, query: r.URL.Query(), header: h, signed: a.signed,
		payloadHash: r.Header.Get("X-Amz-Content-Sha256"), time: tm, region: a.region, svc: a.service, asIs: s3,
	}
	if want := in.signature(secret); want != a.signature {
		return a, fmt.Errorf("signature %s, the spec computes %s over\n%s", a.signature, want, in.canonicalRequest())
	}
	return a, nil
}
