// The reference graphql-ws client (6.x) against Tally's WebSocket
// transport: a bad token must not make it reconnect in a tight loop, and
// the close code and reason must reach the application. Run by
// TestGraphQLWSClientOnBadToken (ws_client_test.go) against a real server.
//
// env: TALLY_WS_URL (ws://…/query), TALLY_BAD_TOKEN, TALLY_GOOD_TOKEN,
// TALLY_WATCH_MS (how long to count connection attempts with the default
// retry settings).
//
// Prints one JSON line:
//   defaults:  {attempts, closes: [{code, reason}], sinkErrors} after
//              TALLY_WATCH_MS with every retry setting at its default
//   exhausted: {attempts, closes, sinkError: {code, reason}} with the
//              default retryAttempts but no wait between retries, to see
//              where the client stops and what the app's error handler gets
//   good:      {next, closes} a subscription with a good token
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const url = process.env.TALLY_WS_URL;
const bad = process.env.TALLY_BAD_TOKEN;
const good = process.env.TALLY_GOOD_TOKEN;
const watchMs = Number(process.env.TALLY_WATCH_MS || 2000);
if (!url || !bad || !good) {
  console.error('TALLY_WS_URL, TALLY_BAD_TOKEN and TALLY_GOOD_TOKEN are required');
  process.exit(2);
}

const query = 'subscription { unreadChanged { unread { total } } }';

function run(token, options, untilMs) {
  return new Promise((resolve) => {
    const out = { attempts: 0, closes: [], sinkErrors: 0, next: null };
    const client = createClient({
      url,
      webSocketImpl: WebSocket,
      connectionParams: { Authorization: 'Bearer ' + token },
      on: {
        connecting: () => out.attempts++,
        closed: (e) => out.closes.push({ code: e.code, reason: e.reason }),
      },
      ...options,
    });
    let timer;
    const finish = () => {
      clearTimeout(timer);
      client.dispose();
      resolve(out);
    };
    client.subscribe({ query }, {
      next: (v) => {
        out.next = v;
        if (untilMs === 0) finish();
      },
      error: (e) => {
        out.sinkErrors++;
        out.sinkError = { code: e.code, reason: e.reason, message: e.message };
        if (untilMs === 0) finish();
      },
      complete: () => {},
    });
    timer = setTimeout(finish, untilMs === 0 ? 20000 : untilMs);
  });
}

// graphql-ws leaves a connection promise rejected when a client is
// disposed while it connects or retries; nothing of the app's sees it, so
// it is reported, not fatal.
const unhandled = [];
process.on('unhandledRejection', (r) => unhandled.push(r && r.code !== undefined ? r.code : String(r)));

const defaults = await run(bad, {}, watchMs);
process.stderr.write('defaults: ' + JSON.stringify(defaults) + '\n'); // seen even if a later phase hangs
const exhausted = await run(bad, { retryWait: async () => {} }, 0);
const goodRun = await run(good, {}, 0);
console.log(JSON.stringify({ defaults, exhausted, good: { next: goodRun.next, closes: goodRun.closes }, unhandled }));
process.exit(0);
