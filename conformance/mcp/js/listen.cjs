// Preloaded with `node --require` into the conformance suite when it runs
// client scenarios: each server a scenario starts on port 0 takes the next
// port of PORTCULLIS_LISTEN_PORTS instead, so that the policy, written
// before the suite starts, can name the ports its servers will be on.
'use strict';
const net = require('node:net');
const ports = (process.env.PORTCULLIS_LISTEN_PORTS ?? '').split(',').filter(Boolean).map(Number);
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const first = args[0];
  const wantsAny = (first === 0 || first === undefined || typeof first === 'function' ||
    (typeof first === 'object' && first !== null && !first.path && !first.port && !first.handle && !first.fd));
  if (ports.length > 0 && wantsAny) {
    const port = ports.shift();
    if (typeof first === 'object' && first !== null) args[0] = { ...first, port };
    else if (first === 0) args[0] = port;
    else args.unshift(port);
  } else if (ports.length === 0 && process.env.PORTCULLIS_LISTEN_PORTS && wantsAny) {
    throw new Error('PORTCULLIS_LISTEN_PORTS: every port is taken');
  }
  return listen.apply(this, args);
};
