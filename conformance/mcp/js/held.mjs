// A TypeScript SDK client making one tools/call that the proxy holds for
// a person's review: held_test.go runs it through a proxy following a real
// gateway and decides the call while this client waits.
//
//   node --require proxy.cjs held.mjs SERVER_URL TOOL ARGUMENTS_JSON
//
// It asks for progress (the SDK then sends a progress token), so the
// proxy answers with an event stream and keeps it alive with
// notifications/progress while the call waits; resetTimeoutOnProgress
// keeps the SDK's own request timeout (60 s by default) from ending a
// wait that the proxy reports progress on. It prints one line per
// progress notification ("progress {json}") and then "result {json}" or
// "error {json}".
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const [url, tool, args] = process.argv.slice(2);
const client = new Client({ name: 'portcullis-held-call', version: '1.0.0' });
await client.connect(new StreamableHTTPClientTransport(new URL(url)));
console.log('connected');
try {
  const result = await client.callTool({ name: tool, arguments: JSON.parse(args) }, undefined, {
    onprogress: (p) => console.log('progress ' + JSON.stringify(p)),
    resetTimeoutOnProgress: true,
    timeout: 60000,
  });
  console.log('result ' + JSON.stringify(result));
} catch (e) {
  console.log('error ' + JSON.stringify({ code: e.code, message: e.message, data: e.data }));
}
await client.close();
