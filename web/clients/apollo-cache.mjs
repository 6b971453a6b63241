// Apollo Client 4's InMemoryCache, with no type policies, keeps a cached
// feed whole across a likePost mutation: the mutation's PostCounts carry
// an id (the post's), so the cache merges the new count into the object
// the feed already references. Run by TestApolloCacheKeepsFeed
// (client_cache_test.go) against a real server.
//
// env: TALLY_URL (the /query endpoint), TALLY_TOKEN (a user's bearer
// token), TALLY_POSTS (comma-separated post ids the user has not liked;
// the first is liked). TALLY_MUTATION_WITHOUT_ID=1 selects the counts
// without their id, the way a client that ignores the identity would:
// then the cache cannot merge them and the feed is no longer complete in
// the cache (the test uses it to show this script can fail).
//
// Prints one JSON line: {before, after, viewerHasLiked, requests, complete}.
import { ApolloClient, HttpLink, InMemoryCache, gql } from '@apollo/client';

const url = process.env.TALLY_URL;
const token = process.env.TALLY_TOKEN;
const ids = (process.env.TALLY_POSTS || '').split(',').filter(Boolean);
if (!url || !token || ids.length === 0) {
  console.error('TALLY_URL, TALLY_TOKEN and TALLY_POSTS are required');
  process.exit(2);
}

let requests = 0;
const countingFetch = (input, init) => {
  requests++;
  return fetch(input, init);
};

const client = new ApolloClient({
  link: new HttpLink({ uri: url, headers: { Authorization: `Bearer ${token}` }, fetch: countingFetch }),
  cache: new InMemoryCache(),
});

const FEED = gql`
  query Feed($ids: [ID!]!) {
    posts(ids: $ids) {
      id
      createdAt
      counts { id likes comments reposts views favorites }
      viewerHasLiked
    }
  }
`;
const LIKE = process.env.TALLY_MUTATION_WITHOUT_ID
  ? gql`mutation Like($id: ID!) { likePost(postId: $id) { id counts { likes } viewerHasLiked } }`
  : gql`mutation Like($id: ID!) { likePost(postId: $id) { id counts { id likes } viewerHasLiked } }`;

const first = await client.query({ query: FEED, variables: { ids }, fetchPolicy: 'network-only' });
if (first.error) throw first.error;
const before = first.data.posts[0].counts.likes;
if (first.data.posts[0].viewerHasLiked) throw new Error(`post ${ids[0]} is already liked by this user`);

const liked = await client.mutate({ mutation: LIKE, variables: { id: ids[0] } });
if (liked.error) throw liked.error;
const afterNetwork = requests;

// The feed again, from the cache only: no request may leave.
const cached = await client.query({ query: FEED, variables: { ids }, fetchPolicy: 'cache-only' });
const diff = client.cache.diff({ query: FEED, variables: { ids }, optimistic: false, returnPartialData: true });
const post = cached.data && cached.data.posts && cached.data.posts[0];

console.log(JSON.stringify({
  before,
  after: post ? post.counts.likes : null,
  viewerHasLiked: post ? post.viewerHasLiked : null,
  // Every post of the page came back from the cache, none null.
  posts: cached.data && cached.data.posts ? cached.data.posts.filter(Boolean).length : 0,
  complete: diff.complete,
  requests,
  requestsAfterMutation: requests - afterNetwork,
}));
client.stop();
