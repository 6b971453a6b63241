// Apollo Client 4 (which asks for application/graphql-response+json) and
// a plain fetch that asks for application/json (curl, Apollo Client 3's
// */*) both see a validation failure as GraphQL errors with
// extensions.code, not as a bare HTTP status. Run by
// TestClientsSeeRequestErrors (httpspec_test.go).
//
// env: TALLY_URL (the /query endpoint). Prints one JSON line.
import { ApolloClient, HttpLink, InMemoryCache, gql, CombinedGraphQLErrors } from '@apollo/client';

const url = process.env.TALLY_URL;
if (!url) {
  console.error('TALLY_URL is required');
  process.exit(2);
}
const out = {};

let accept = '';
const client = new ApolloClient({
  link: new HttpLink({
    uri: url,
    fetch: (input, init) => {
      accept = new Headers(init.headers).get('accept');
      return fetch(input, init);
    },
  }),
  cache: new InMemoryCache(),
});
try {
  await client.query({ query: gql`query Broken { noSuchField }` });
  out.apollo = { error: null };
} catch (e) {
  out.apollo = {
    accept,
    combined: CombinedGraphQLErrors.is(e),
    name: e.name,
    message: e.message,
    codes: CombinedGraphQLErrors.is(e) ? e.errors.map((x) => x.extensions?.code) : [],
  };
}

const res = await fetch(url, {
  method: 'POST',
  headers: { 'content-type': 'application/json', accept: '*/*' },
  body: JSON.stringify({ query: 'query Broken { noSuchField }' }),
});
const body = await res.json();
out.fetch = {
  status: res.status,
  contentType: res.headers.get('content-type'),
  hasData: 'data' in body,
  codes: (body.errors || []).map((x) => x.extensions?.code),
};
console.log(JSON.stringify(out));
