package credentials

import (
	"bytes"
	"context"
	"encoding/base64"
	"net/http"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
	"github.com/portcullis-dev/portcullis/provider"
)

// Plan is what the proxy does to one forwarded request for its bound
// provider. It holds the credential: it lives as long as the request.
type Plan struct {
	header, value string // the header set, and its value
	placeholder   string // replaced in the body by credential, when rewriting
	credential    string
	rewrite       bool // request_body_credential_rewrite
	// name is the provider's, for websocket_credential_rewrite, and again
	// judges the request again with what the holder holds then.
	name  string
	again func() (*Plan, string, string)
	sign  *signing
	now   func() time.Time
}

// plan is the Plan for a request bound to e, fetching e's token when its
// type has one.
func (h *Holder) plan(ctx context.Context, r *http.Request, in Request, e *entry, body []byte) (*Plan, *Denial) {
	ep := in.Endpoint
	p := &Plan{header: headerOf(e.p), placeholder: provider.Placeholder(e.p.Name), now: h.cfg.Now}
	sec := e.p.Secret
	if ep.CredentialSigning != "" && e.p.Type != provider.TypeAWS {
		return nil, deny(CodeUnavailable, "credential_signing %s needs an aws provider; provider %s is %s", ep.CredentialSigning, e.p.Name, e.p.Type)
	}
	switch e.p.Type {
	case provider.TypeBearer:
		p.credential = sec[provider.FieldToken]
		p.value = "Bearer " + p.credential
	case provider.TypeHeader:
		p.credential = sec[provider.FieldValue]
		p.value = p.credential
	case provider.TypeBasic:
		p.credential = sec[provider.FieldPassword]
		p.value = "Basic " + base64.StdEncoding.EncodeToString([]byte(e.p.Settings[provider.SettingUsername]+":"+p.credential))
	case provider.TypeOAuth2ClientCredentials, provider.TypeTokenExchange:
		tok, err := e.tokens.get(ctx, h.cfg.Now, func(ctx context.Context) (token, error) { return h.fetch(ctx, e.p) })
		if err != nil {
			return nil, deny(CodeUnavailable, "provider %s: %v", e.p.Name, err)
		}
		p.credential = tok
		p.value = "Bearer " + tok
	case provider.TypeAWS:
		if ep.CredentialSigning == "" {
			return nil, deny(CodeUnavailable, "provider %s is an aws provider: the endpoint must set credential_signing", e.p.Name)
		}
		s, d := newSigning(r, in, e.p, body)
		if d != nil {
			return nil, d
		}
		p.header, p.sign = "", s
	default:
		return nil, deny(CodeUnavailable, "provider %s has type %q, which this proxy does not know", e.p.Name, e.p.Type)
	}
	p.rewrite = ep.RequestBodyCredentialRewrite && ep.Protocol == policy.ProtocolREST && p.sign == nil
	if ep.WebsocketCredentialRewrite && ep.Protocol == policy.ProtocolREST && p.sign == nil {
		p.name = e.p.Name
		p.again = func() (*Plan, string, string) { return h.Recheck(ctx, r, in, body) }
	}
	return p, nil
}

// WebSocketRewrite returns the provider whose placeholders the proxy
// replaces in the text messages of the WebSocket this Plan's request
// opens (websocket_credential_rewrite), and the credential that replaces
// them in one message: the handshake judged again (Recheck) with what
// the proxy holds when the message is sent, so that a rotation reaches
// an open WebSocket and a detached provider's placeholder is refused.
// "" when none does (a nil Plan, an endpoint without the field, an aws
// provider, whose credential signs and never travels). The credential
// may be asked for while the request's handler runs.
func (p *Plan) WebSocketRewrite() (provider string, credential func() ([]byte, string, string)) {
	if p == nil || p.name == "" {
		return "", nil
	}
	return p.name, func() ([]byte, string, string) {
		now, code, reason := p.again()
		switch {
		case reason != "":
			return nil, code, reason
		case now == nil || now.name != p.name:
			return nil, CodeUnavailable, "provider " + p.name + " no longer rewrites this WebSocket"
		}
		return []byte(now.credential), "", ""
	}
}

// Apply adds the credential to out, the request forwarded (its header a
// copy the proxy may change), and returns the body to forward in place
// of body (the one Check returned; nil: r's body is streamed). A nil
// Plan adds nothing.
func (p *Plan) Apply(out *http.Request, body []byte) []byte {
	if p == nil {
		return body
	}
	if p.header != "" {
		out.Header.Set(p.header, p.value)
	}
	if p.rewrite && body != nil {
		body = bytes.ReplaceAll(body, []byte(p.placeholder), []byte(p.credential))
		out.Header.Del("Content-Length") // the length of the body sent is the proxy's
	}
	if p.sign != nil {
		p.sign.apply(out, body, p.now())
	}
	return body
}
