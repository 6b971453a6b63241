// Runs graphql-http's GraphQL-over-HTTP server audit against TALLY_URL
// (the /query endpoint) and prints one JSON line per audit: id, name,
// status (ok, notice, warn, error), reason and, for a failure, the
// response's status and body. The Go test (httpspec_test.go) judges them.
import { serverAudits } from 'graphql-http';

const url = process.env.TALLY_URL;
if (!url) {
  console.error('TALLY_URL is not set');
  process.exit(2);
}
const headers = process.env.TALLY_AUTH ? { authorization: process.env.TALLY_AUTH } : {};
const fetchFn = (input, init = {}) =>
  fetch(input, { ...init, headers: { ...headers, ...(init.headers || {}) } });

for (const audit of serverAudits({ url, fetchFn })) {
  const r = await audit.fn();
  const line = { id: r.id, name: r.name, status: r.status };
  if (r.status !== 'ok') {
    line.reason = r.reason;
    try {
      line.httpStatus = r.response.status;
      line.contentType = r.response.headers.get('content-type');
      line.body = (await r.response.text()).slice(0, 500);
    } catch (e) {
      line.body = `(body unreadable: ${e})`;
    }
  }
  console.log(JSON.stringify(line));
}
