// A WebSocket client on undici's WebSocket (the WHATWG API Node.js
// ships), through the proxy js/proxy.cjs sets as the global dispatcher.
// It opens argv[2], sends each message of the JSON array in MESSAGES
// (a string is sent as text; {"binary": "base64"} as binary), one at a
// time, waiting for the server's answer to each, and prints a JSON line
// for what happens: {"open": extensions}, {"recv": text} or
// {"recvBinary": base64}, {"close": code, "reason": reason}, {"error": msg}.
'use strict';
const { WebSocket } = require('undici');
const out = (v) => process.stdout.write(JSON.stringify(v) + '\n');
const messages = JSON.parse(process.env.MESSAGES || '[]');
const ws = new WebSocket(process.argv[2]);
ws.binaryType = 'arraybuffer';
let next = 0;
const send = () => {
  if (next >= messages.length) {
    ws.close(1000, 'done');
    return;
  }
  const m = messages[next++];
  ws.send(typeof m === 'string' ? m : Buffer.from(m.binary, 'base64'));
};
ws.onopen = () => { out({ open: ws.extensions }); send(); };
ws.onmessage = (e) => {
  if (typeof e.data === 'string') out({ recv: e.data });
  else out({ recvBinary: Buffer.from(e.data).toString('base64') });
  send();
};
ws.onerror = (e) => out({ error: String(e.message || e.error || e.type) });
ws.onclose = (e) => { out({ close: e.code, reason: e.reason }); process.exit(0); };
setTimeout(() => { out({ error: 'timeout' }); process.exit(1); }, 20000);
