// The server the conformance suite's server scenarios run against: every
// tool, resource and prompt those scenarios name, on the TypeScript SDK's
// low-level Server and its Streamable HTTP transport (stateful sessions,
// an event store for resumability, hence SSE priming events).
//
// Written for Portcullis from the scenarios' expectations; run as
//   node server.mjs
// It listens on 127.0.0.1:0 and prints its URL, http://127.0.0.1:PORT/mcp,
// once listening.
import http from 'node:http';
import { randomUUID } from 'node:crypto';
import { Server } from '@modelcontextprotocol/sdk/server/index.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import {
  CallToolRequestSchema, ListToolsRequestSchema, ListResourcesRequestSchema,
  ListResourceTemplatesRequestSchema, ReadResourceRequestSchema,
  SubscribeRequestSchema, UnsubscribeRequestSchema, ListPromptsRequestSchema,
  GetPromptRequestSchema, SetLevelRequestSchema, CompleteRequestSchema,
  CreateMessageResultSchema, ElicitResultSchema, McpError, ErrorCode,
  isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';

const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==';
const WAV = 'UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=';
const noArgs = { type: 'object', properties: {} };
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const text = (t) => ({ content: [{ type: 'text', text: t }] });

const tools = [
  { name: 'test_simple_text', description: 'simple text content', inputSchema: noArgs },
  { name: 'test_image_content', description: 'image content', inputSchema: noArgs },
  { name: 'test_audio_content', description: 'audio content', inputSchema: noArgs },
  { name: 'test_embedded_resource', description: 'embedded resource content', inputSchema: noArgs },
  { name: 'test_multiple_content_types', description: 'text, image and resource content', inputSchema: noArgs },
  { name: 'test_tool_with_logging', description: 'logs while it runs', inputSchema: noArgs },
  { name: 'test_tool_with_progress', description: 'reports progress', inputSchema: noArgs },
  { name: 'test_error_handling', description: 'always fails', inputSchema: noArgs },
  { name: 'test_reconnection', description: 'closes its SSE stream mid-call (SEP-1699)', inputSchema: noArgs },
  { name: 'test_sampling', description: 'asks the client for a completion',
    inputSchema: { type: 'object', properties: { prompt: { type: 'string' } }, required: ['prompt'] } },
  { name: 'test_elicitation', description: 'asks the client for input',
    inputSchema: { type: 'object', properties: { message: { type: 'string' } }, required: ['message'] } },
  { name: 'test_elicitation_sep1034_defaults', description: 'elicitation with defaults (SEP-1034)', inputSchema: noArgs },
  { name: 'test_elicitation_sep1330_enums', description: 'elicitation with enums (SEP-1330)', inputSchema: noArgs },
  { name: 'json_schema_2020_12_tool', description: 'JSON Schema 2020-12 input (SEP-1613)',
    inputSchema: {
      $schema: 'https://json-schema.org/draft/2020-12/schema', type: 'object',
      $defs: { address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
      properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' } },
      additionalProperties: false,
    } },
];

const sep1034 = {
  type: 'object', required: [],
  properties: {
    name: { type: 'string', description: 'User name', default: 'John Doe' },
    age: { type: 'integer', description: 'User age', default: 30 },
    score: { type: 'number', description: 'User score', default: 95.5 },
    status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
    verified: { type: 'boolean', description: 'Verification status', default: true },
  },
};
const sep1330 = {
  type: 'object', required: [],
  properties: {
    untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
    titledSingle: { type: 'string', description: 'Select one option with titles',
      oneOf: [{ const: 'value1', title: 'First Option' }, { const: 'value2', title: 'Second Option' }, { const: 'value3', title: 'Third Option' }] },
    legacyEnum: { type: 'string', description: 'Select one option (legacy)', enum: ['opt1', 'opt2', 'opt3'],
      enumNames: ['Option One', 'Option Two', 'Option Three'] },
    untitledMulti: { type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3,
      items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
    titledMulti: { type: 'array', description: 'Select multiple options with titles', minItems: 1, maxItems: 3,
      items: { anyOf: [{ const: 'value1', title: 'First Choice' }, { const: 'value2', title: 'Second Choice' }, { const: 'value3', title: 'Third Choice' }] } },
  },
};

const resources = {
  'test://static-text': { name: 'static-text', mimeType: 'text/plain', text: 'This is the content of the static text resource.' },
  'test://static-binary': { name: 'static-binary', mimeType: 'image/png', blob: PNG },
  'test://watched-resource': { name: 'watched-resource', mimeType: 'text/plain', text: 'Watched resource content' },
};

const prompts = [
  { name: 'test_simple_prompt', description: 'no arguments' },
  { name: 'test_prompt_with_arguments', description: 'two required arguments',
    arguments: [{ name: 'arg1', description: 'First test argument', required: true }, { name: 'arg2', description: 'Second test argument', required: true }] },
  { name: 'test_prompt_with_embedded_resource', description: 'embeds a resource',
    arguments: [{ name: 'resourceUri', description: 'URI of the resource to embed', required: true }] },
  { name: 'test_prompt_with_image', description: 'includes an image' },
];

// One event store for every session: events are kept per stream.
const events = new Map();
const eventStore = {
  async storeEvent(streamId, message) {
    const id = `${streamId}::${String(events.size).padStart(12, '0')}`;
    events.set(id, { streamId, message });
    return id;
  },
  async replayEventsAfter(lastEventId, { send }) {
    const streamId = lastEventId.split('::')[0];
    for (const [id, e] of [...events.entries()].sort(([a], [b]) => a.localeCompare(b))) {
      if (e.streamId === streamId && id > lastEventId && Object.keys(e.message).length > 0) await send(id, e.message);
    }
    return streamId;
  },
};

const transports = new Map();

function newServer() {
  const s = new Server({ name: 'portcullis-conformance-subject', version: '1.0.0' }, {
    capabilities: { tools: { listChanged: true }, resources: { subscribe: true, listChanged: true },
      prompts: { listChanged: true }, logging: {}, completions: {} },
  });
  const log = (data) => s.notification({ method: 'notifications/message', params: { level: 'info', logger: 'subject', data } }).catch(() => {});
  s.setRequestHandler(ListToolsRequestSchema, async () => ({ tools }));
  s.setRequestHandler(CallToolRequestSchema, async (req, extra) => {
    const args = req.params.arguments ?? {};
    // The server's requests go on the tools/call's own event stream
    // (extra.sendRequest), not the session's GET stream (Server.request):
    // a request sent before the client's GET reached the server is dropped
    // by the SDK's transport, and the call then waits forever. The suite's
    // own example server sends them with Server.request; through a proxy,
    // where the GET and the call travel on connections of their own, it
    // loses that race now and then.
    const request = (req, schema) => extra.sendRequest(req, schema);
    const elicit = async (message, requestedSchema) => {
      const r = await request({ method: 'elicitation/create', params: { mode: 'form', message, requestedSchema } }, ElicitResultSchema);
      return text(`Elicitation completed: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
    };
    switch (req.params.name) {
      case 'test_simple_text': return text('This is a simple text response for testing.');
      case 'test_image_content': return { content: [{ type: 'image', data: PNG, mimeType: 'image/png' }] };
      case 'test_audio_content': return { content: [{ type: 'audio', data: WAV, mimeType: 'audio/wav' }] };
      case 'test_embedded_resource':
        return { content: [{ type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } }] };
      case 'test_multiple_content_types':
        return { content: [
          { type: 'text', text: 'Multiple content types test:' },
          { type: 'image', data: PNG, mimeType: 'image/png' },
          { type: 'resource', resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: '{"test":"data","value":123}' } },
        ] };
      case 'test_tool_with_logging':
        for (const [i, m] of ['Tool execution started', 'Tool processing data', 'Tool execution completed'].entries()) {
          if (i > 0) await sleep(50);
          await extra.sendNotification({ method: 'notifications/message', params: { level: 'info', data: m } });
        }
        return text('Tool with logging executed successfully');
      case 'test_tool_with_progress': {
        const progressToken = req.params._meta?.progressToken ?? 0;
        for (const p of [0, 50, 100]) {
          if (p > 0) await sleep(50);
          await extra.sendNotification({ method: 'notifications/progress', params: { progressToken, progress: p, total: 100, message: `Completed step ${p} of 100` } });
        }
        return text(String(progressToken));
      }
      case 'test_error_handling':
        return { isError: true, content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }] };
      case 'test_reconnection': {
        const t = transports.get(extra.sessionId);
        if (t && extra.requestId !== undefined) t.closeSSEStream(extra.requestId);
        await sleep(100);
        return text('Reconnection test completed successfully.');
      }
      case 'test_sampling': {
        const r = await request({ method: 'sampling/createMessage', params: {
          messages: [{ role: 'user', content: { type: 'text', text: String(args.prompt ?? '') } }], maxTokens: 100 } }, CreateMessageResultSchema);
        return text(`LLM response: ${r.content?.text ?? 'No response'}`);
      }
      case 'test_elicitation': {
        const r = await request({ method: 'elicitation/create', params: { mode: 'form', message: String(args.message ?? ''),
          requestedSchema: { type: 'object', properties: { response: { type: 'string', description: "User's response" } }, required: ['response'] } } }, ElicitResultSchema);
        return text(`User response: action=${r.action}, content=${JSON.stringify(r.content ?? {})}`);
      }
      case 'test_elicitation_sep1034_defaults': return elicit('Please review and update the form fields with defaults', sep1034);
      case 'test_elicitation_sep1330_enums': return elicit('Please select options from the enum fields', sep1330);
      case 'json_schema_2020_12_tool': return text(`JSON Schema 2020-12 tool called with: ${JSON.stringify(args)}`);
    }
    throw new McpError(ErrorCode.InvalidParams, `unknown tool: ${req.params.name}`);
  });
  s.setRequestHandler(ListResourcesRequestSchema, async () => ({
    resources: Object.entries(resources).map(([uri, r]) => ({ uri, name: r.name, mimeType: r.mimeType })),
  }));
  s.setRequestHandler(ListResourceTemplatesRequestSchema, async () => ({
    resourceTemplates: [{ uriTemplate: 'test://template/{id}/data', name: 'template', mimeType: 'application/json' }],
  }));
  s.setRequestHandler(ReadResourceRequestSchema, async (req) => {
    const uri = req.params.uri;
    const r = resources[uri];
    if (r) return { contents: [{ uri, mimeType: r.mimeType, ...(r.blob ? { blob: r.blob } : { text: r.text }) }] };
    const m = /^test:\/\/template\/([^/]+)\/data$/.exec(uri);
    if (m) return { contents: [{ uri, mimeType: 'application/json', text: JSON.stringify({ id: m[1], templateTest: true, data: `Data for ID: ${m[1]}` }) }] };
    throw new McpError(-32002, `resource not found: ${uri}`);
  });
  s.setRequestHandler(SubscribeRequestSchema, async (req) => { log(`Subscribed to resource: ${req.params.uri}`); return {}; });
  s.setRequestHandler(UnsubscribeRequestSchema, async (req) => { log(`Unsubscribed from resource: ${req.params.uri}`); return {}; });
  s.setRequestHandler(ListPromptsRequestSchema, async () => ({ prompts }));
  s.setRequestHandler(GetPromptRequestSchema, async (req) => {
    const a = req.params.arguments ?? {};
    const user = (content) => ({ role: 'user', content });
    switch (req.params.name) {
      case 'test_simple_prompt': return { messages: [user({ type: 'text', text: 'This is a simple prompt for testing.' })] };
      case 'test_prompt_with_arguments': return { messages: [user({ type: 'text', text: `Prompt with arguments: arg1='${a.arg1}', arg2='${a.arg2}'` })] };
      case 'test_prompt_with_embedded_resource': return { messages: [
        user({ type: 'resource', resource: { uri: a.resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } }),
        user({ type: 'text', text: 'Please process the embedded resource above.' })] };
      case 'test_prompt_with_image': return { messages: [
        user({ type: 'image', data: PNG, mimeType: 'image/png' }), user({ type: 'text', text: 'Please analyze the image above.' })] };
    }
    throw new McpError(ErrorCode.InvalidParams, `unknown prompt: ${req.params.name}`);
  });
  s.setRequestHandler(SetLevelRequestSchema, async (req) => { log(`Log level set to: ${req.params.level}`); return {}; });
  s.setRequestHandler(CompleteRequestSchema, async () => ({ completion: { values: [], total: 0, hasMore: false } }));
  return s;
}

// DNS rebinding protection: only loopback names in Host and Origin.
const loopback = /^(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$/i;
function localOnly(req) {
  if (!loopback.test(req.headers.host ?? '')) return false;
  const origin = req.headers.origin;
  if (origin === undefined) return true;
  try { return loopback.test(new URL(origin).host); } catch { return false; }
}

function reply(res, status, message) {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify({ jsonrpc: '2.0', error: { code: -32000, message }, id: null }));
}

async function readJSON(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

const httpServer = http.createServer(async (req, res) => {
  try {
    if (new URL(req.url, 'http://x').pathname !== '/mcp') return reply(res, 404, 'not found');
    if (!localOnly(req)) return reply(res, 403, 'Host or Origin is not a loopback name');
    const sid = req.headers['mcp-session-id'];
    let t = sid ? transports.get(sid) : undefined;
    if (req.method === 'POST') {
      const body = await readJSON(req);
      if (!t && !sid && isInitializeRequest(body)) {
        const s = newServer();
        t = new StreamableHTTPServerTransport({
          sessionIdGenerator: () => randomUUID(), eventStore, retryInterval: 5000,
          onsessioninitialized: (id) => transports.set(id, t),
        });
        t.onclose = () => { if (t.sessionId) transports.delete(t.sessionId); };
        await s.connect(t);
      }
      if (!t) return reply(res, 400, 'Invalid or missing session ID');
      return await t.handleRequest(req, res, body);
    }
    if (!t) return reply(res, 400, 'Invalid or missing session ID');
    await t.handleRequest(req, res);
  } catch (e) {
    if (!res.headersSent) reply(res, 500, String(e?.message ?? e));
  }
});

httpServer.listen(0, '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${httpServer.address().port}/mcp`);
});
