// A crowd behind one address: TALLY_CLIENTS reference graphql-ws clients
// (6.x, every retry setting at its default) open their sockets at once
// from this one process and subscribe to unreadChanged, each as its own
// user, as an office or a carrier's NAT would after a server restart. Run
// by TestGraphQLWSCrowdBehindOneAddress (ws_client_test.go) against a
// real server whose per-address cap is below the crowd.
//
// env: TALLY_WS_URL (ws://…/query), TALLY_TOKENS (comma-separated, one
// per client), TALLY_WITHIN_MS (how long to wait for every client's first
// push).
//
// Prints one JSON line: {clients, subscribed, failed, attempts, closes:
// {code: count}, lastMs (when the last client got its first push, from
// the start), errors: [the first few errors the subscriptions' sinks got]}.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const url = process.env.TALLY_WS_URL;
const tokens = (process.env.TALLY_TOKENS || '').split(',').filter(Boolean);
const withinMs = Number(process.env.TALLY_WITHIN_MS || 30000);
if (!url || tokens.length === 0) {
  console.error('TALLY_WS_URL and TALLY_TOKENS are required');
  process.exit(2);
}

const query = 'subscription { unreadChanged { unread { total } } }';
const out = { clients: tokens.length, subscribed: 0, failed: 0, attempts: 0, closes: {}, lastMs: 0, errors: [] };
const start = Date.now();
const clients = [];

let timer;
await new Promise((resolve) => {
  let settled = 0;
  const done = () => {
    if (++settled === tokens.length) resolve();
  };
  timer = setTimeout(resolve, withinMs);
  for (const token of tokens) {
    const client = createClient({
      url,
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: 'Bearer ' + token },
      on: {
        connecting: () => out.attempts++,
        closed: (e) => {
          out.closes[e.code] = (out.closes[e.code] || 0) + 1;
        },
      },
    });
    clients.push(client);
    let first = true;
    client.subscribe({ query }, {
      next: () => {
        if (first) {
          first = false;
          out.subscribed++;
          out.lastMs = Date.now() - start;
          done();
        }
      },
      error: (e) => {
        out.failed++;
        if (out.errors.length < 5) {
          out.errors.push({ code: e.code, reason: e.reason, message: e.message });
        }
        done();
      },
      complete: () => {},
    });
  }
});
clearTimeout(timer);

for (const c of clients) c.dispose();
console.log(JSON.stringify(out));
process.exit(0);
