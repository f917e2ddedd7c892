// Package credentials is how the proxy uses the credentials of the
// providers attached to its sandbox (package provider): the Holder keeps
// the bundle the gateway delivers (SetCredentials: swapped atomically,
// held in memory only, the tokens fetched for a provider dropped when it
// changes), judges each inspected request the policy allows against it
// (Check), and adds the credential to, or signs, the request forwarded
// upstream (Plan.Apply).
//
// Only inspected requests are touched: plain HTTP, or TLS the proxy
// terminates. For an allowed request, the endpoint that decided it may
// bind a provider (credential_binding: {provider: NAME}). Then:
//
//   - NAME must be in the bundle held, else the request is denied
//     (CodeUnavailable: not attached, or not delivered yet), and it must
//     cover the request's host, port and scheme (provider.Covers: TLS, or
//     plain HTTP only to a host written http://), else denied
//     (CodeUnavailable, naming the host).
//   - By type: bearer, oauth2-client-credentials and token-exchange set
//     Authorization: Bearer VALUE (the two last with an access token the
//     proxy fetches and keeps until shortly before it expires, one fetch
//     at a time per provider); header sets the header its setting names
//     to the value; basic sets Authorization: Basic of username:password;
//     aws signs the request with SigV4 (credential_signing). The agent
//     sends, in that header, the placeholder portcullis:provider:NAME
//     (Authorization: Bearer portcullis:provider:NAME, or the header's
//     whole value; for basic, also as the password of a Basic value), or
//     nothing: the proxy sets the real value either way. Any other value
//     there is denied (CodeSupplied): the agent must not hold a
//     credential.
//   - request_body_credential_rewrite: the body is read whole, at most
//     MaxRewriteBody bytes (a larger one is denied), and every
//     portcullis:provider:NAME in it replaced by the credential (the
//     token, value or password; the fetched access token), its length
//     fixed; a placeholder naming another provider is denied.
//   - credential_signing (aws providers only, and an aws provider needs
//     it): the agent's own AWS signature headers (Authorization,
//     X-Amz-Date, X-Amz-Security-Token, X-Amz-Content-Sha256) are
//     removed, then the request is signed with AWS Signature Version 4
//     for the endpoint's signing_service and signing_region (the region
//     read from the host, as in s3.us-west-2.amazonaws.com, when it is
//     left out), X-Amz-Security-Token set from session_token when the
//     provider has one. The agent's Authorization may be absent or name
//     the placeholder as its access key (Credential=portcullis:provider:
//     NAME/...); a real access key is denied (CodeSupplied). As OpenShell
//     does: sigv4:body reads the body whole (at most MaxSignedBody bytes;
//     larger is denied) and signs its SHA-256; sigv4:no_body signs
//     UNSIGNED-PAYLOAD and streams the body; sigv4 follows the agent's
//     X-Amz-Content-Sha256 — UNSIGNED-PAYLOAD signs that and streams, a
//     STREAMING-* value is denied (chunk signatures the proxy cannot
//     make; unlike OpenShell, STREAMING-UNSIGNED-PAYLOAD-TRAILER too: use
//     sigv4:no_body), a hash, or no header on a request with a
//     Content-Length, signs the body, else UNSIGNED-PAYLOAD.
//     X-Amz-Content-Sha256 always carries what was signed. The proxy
//     signs Host, Content-Type, Content-MD5 and the X-Amz-* headers; S3's
//     path is signed as sent, every other service's escaped once more.
//
// Everywhere else: a placeholder (provider.IndexPlaceholder: any case) in the
// request target (as sent or percent-decoded), in any header value, or in
// a body the proxy reads anyway (an MCP body, a held call's, a rewritten
// one) is denied (CodePlaceholder) unless the deciding endpoint binds
// that provider and it covers the host; such a request is never
// forwarded. And while the proxy holds credentials, a header value that
// contains a held secret value (of at least MinSearchedSecret bytes) or
// an access token it fetched is denied (CodeSupplied), to any host.
//
// Token fetches fail closed: a token server that cannot be reached,
// answers other than 2xx, or with a body that is not a token, denies the
// request (CodeUnavailable) with the status and the RFC 6749 error code
// and description, cut short; nothing is forwarded, and the failure is
// answered again without a fetch for 5 s. The token URL is
// dialled with the checks upstream addresses get: an always-denied
// address (policy.AlwaysDenied; loopback only with DevAllowLoopback) or a
// control-plane port is refused.
//
// Denials carry a Code and a Reason meant for the decision record and the
// agent: never a secret, nor the value of a header.
package credentials
