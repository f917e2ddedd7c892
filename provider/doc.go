// Package provider is what a credential provider is, shared by the
// gateway, which keeps providers' secrets, and the proxy, which uses them:
// the types and the settings and secret fields each takes (Spec, Check),
// the destinations a provider covers (Host, Covers), the placeholder an
// agent writes where a credential goes (Placeholder), and the Bundle a
// sandbox's proxies receive, sealed with HPKE to a key each proxy run
// makes and keeps in memory (NewKey, Seal, Open).
//
// A provider never gives its secret to the agent. The proxy adds it to,
// or signs, the requests its policy binds to the provider (an endpoint's
// credential_binding) on hosts the provider covers:
//
//   - bearer: Authorization: Bearer SECRET (secret field token)
//   - header: the header named by the setting header, set to the secret
//     (field value)
//   - basic: Authorization: Basic of the setting username and the secret
//     (field password)
//   - aws: the request signed with AWS Signature Version 4 (fields
//     access_key_id, secret_access_key and, for temporary credentials,
//     session_token; the endpoint's signing_service and signing_region)
//   - oauth2-client-credentials: Authorization: Bearer of an access token
//     the proxy fetches from the setting token_url with the client
//     credentials grant (RFC 6749 §4.4; fields client_id, client_secret;
//     settings scopes, audience, resource) and keeps until it expires
//   - token-exchange: Authorization: Bearer of an access token the proxy
//     obtains from token_url by RFC 8693 token exchange of the secret
//     subject_token (optionally authenticating with client_id and
//     client_secret; settings audience, resource, scopes,
//     subject_token_type, requested_token_type)
package provider
