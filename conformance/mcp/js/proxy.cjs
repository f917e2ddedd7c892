// Preloaded with `node --require` into the conformance suite and its
// clients: every fetch and undici request goes through the proxy in
// PORTCULLIS_PROXY, loopback destinations included (Node's own proxy
// support skips them, and Node 20 and 22 read HTTP_PROXY only behind a
// flag). PORTCULLIS_PROXY_FORM is "absolute" (absolute-form requests,
// HTTP_PROXY style) or "connect" (a CONNECT tunnel, plain HTTP inside).
'use strict';
const { ProxyAgent, setGlobalDispatcher } = require('undici');
const uri = process.env.PORTCULLIS_PROXY;
const form = process.env.PORTCULLIS_PROXY_FORM;
if (uri) {
  if (form !== 'absolute' && form !== 'connect') {
    throw new Error(`PORTCULLIS_PROXY_FORM must be "absolute" or "connect", not ${JSON.stringify(form)}`);
  }
  setGlobalDispatcher(new ProxyAgent({ uri, proxyTunnel: form === 'connect' }));
}
