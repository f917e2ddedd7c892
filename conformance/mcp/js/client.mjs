// The MCP client the conformance suite's client auth/* scenarios run:
// an OAuth client on the TypeScript SDK's client auth (discovery, dynamic
// or pre-registration, client ID metadata documents, PKCE, scope step-up).
// The scenario's authorization server approves at once: its /authorize
// answers with a redirect carrying the code, which the client reads
// without following it.
//
// Written for Portcullis; the suite runs it as
//   node client.mjs SERVER_URL
// with MCP_CONFORMANCE_SCENARIO and, for some scenarios,
// MCP_CONFORMANCE_CONTEXT (JSON: pre-registered client_id and
// client_secret) set.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { auth, extractWWWAuthenticateParams, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

const serverUrl = process.argv[process.argv.length - 1];
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? '';
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? '{}');
const redirect = 'http://localhost:3000/callback';

class Provider {
  #info; #tokens; #verifier; #code;
  constructor() {
    if (context.client_id) this.#info = { client_id: context.client_id, client_secret: context.client_secret };
  }
  get redirectUrl() { return redirect; }
  get clientMetadata() {
    return { client_name: 'portcullis-conformance-client', redirect_uris: [redirect] };
  }
  // SEP-991: offered; used when the server says it takes URL client IDs.
  get clientMetadataUrl() { return 'https://conformance-test.local/client-metadata.json'; }
  clientInformation() { return this.#info; }
  saveClientInformation(info) { this.#info = info; }
  tokens() { return this.#tokens; }
  saveTokens(tokens) { this.#tokens = tokens; }
  saveCodeVerifier(v) { this.#verifier = v; }
  codeVerifier() { if (!this.#verifier) throw new Error('no code verifier'); return this.#verifier; }
  async redirectToAuthorization(url) {
    const res = await fetch(url, { redirect: 'manual' });
    const location = res.headers.get('location');
    if (!location) throw new Error(`no redirect from ${url} (HTTP ${res.status})`);
    const code = new URL(location).searchParams.get('code');
    if (!code) throw new Error(`no code in the redirect to ${location}`);
    this.#code = code;
  }
  takeCode() { const c = this.#code; this.#code = undefined; if (!c) throw new Error('no authorization code'); return c; }
  invalidateCredentials(scope) {
    this.#tokens = undefined;
    if (scope === 'all' || scope === 'client') this.#info = context.client_id ? this.#info : undefined;
    if (scope === 'all' || scope === 'verifier') this.#verifier = undefined;
  }
}

const provider = new Provider();

async function authorize(res, next) {
  const { resourceMetadataUrl, scope } = extractWWWAuthenticateParams(res);
  const opts = { serverUrl: new URL(serverUrl), resourceMetadataUrl, scope, fetchFn: next };
  let result = await auth(provider, opts);
  if (result === 'REDIRECT') result = await auth(provider, { ...opts, authorizationCode: provider.takeCode() });
  if (result !== 'AUTHORIZED') throw new UnauthorizedError(`authorization ended with ${result}`);
}

// authFetch sends the bearer token, and on 401 (or 403 insufficient_scope:
// step-up) authorizes and retries, at most three times per request.
async function authFetch(input, init) {
  const send = () => {
    const headers = new Headers(init?.headers);
    const t = provider.tokens();
    if (t) headers.set('Authorization', `Bearer ${t.access_token}`);
    return fetch(input, { ...init, headers });
  };
  let res = await send();
  for (let i = 0; i < 3; i++) {
    const stepUp = res.status === 403 && extractWWWAuthenticateParams(res).error === 'insufficient_scope';
    if (res.status !== 401 && !stepUp) break;
    await authorize(res, fetch);
    res = await send();
  }
  return res;
}

const client = new Client({ name: 'portcullis-conformance-client', version: '1.0.0' }, { capabilities: {} });
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(serverUrl), { fetch: authFetch }));
  const { tools } = await client.listTools();
  for (const tool of tools) await client.callTool({ name: tool.name, arguments: {} });
  await client.close();
  console.log(`${scenario}: done`);
} catch (e) {
  console.error(`${scenario}: ${e?.stack ?? e}`);
  process.exit(1);
}
