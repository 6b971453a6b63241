// urql with @urql/exchange-graphcache (a normalising cache, no keys or
// updaters configured) keeps a cached feed whole across a likePost
// mutation: the mutation's PostCounts carry their id, so graphcache writes
// the new count into the entity the feed references. Run by
// TestUrqlGraphcacheKeepsFeed (client_cache_test.go) against a real server.
//
// env as for apollo-cache.mjs: TALLY_URL, TALLY_TOKEN, TALLY_POSTS (the
// first is liked), TALLY_MUTATION_WITHOUT_ID=1 for the control run.
//
// Prints one JSON line: {before, after, viewerHasLiked, posts, stale, requestsAfterMutation}.
import { createClient, fetchExchange, gql } from '@urql/core';
import { cacheExchange } from '@urql/exchange-graphcache';

const url = process.env.TALLY_URL;
const token = process.env.TALLY_TOKEN;
const ids = (process.env.TALLY_POSTS || '').split(',').filter(Boolean);
if (!url || !token || ids.length === 0) {
  console.error('TALLY_URL, TALLY_TOKEN and TALLY_POSTS are required');
  process.exit(2);
}

let requests = 0;
const client = createClient({
  url,
  exchanges: [cacheExchange({}), fetchExchange],
  fetch: (input, init) => { requests++; return fetch(input, init); },
  fetchOptions: { headers: { Authorization: `Bearer ${token}` } },
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

const first = await client.query(FEED, { ids }, { requestPolicy: 'network-only' }).toPromise();
if (first.error) throw first.error;
const before = first.data.posts[0].counts.likes;
if (first.data.posts[0].viewerHasLiked) throw new Error(`post ${ids[0]} is already liked by this user`);

const liked = await client.mutation(LIKE, { id: ids[0] }).toPromise();
if (liked.error) throw liked.error;
const afterNetwork = requests;

const cached = await client.query(FEED, { ids }, { requestPolicy: 'cache-only' }).toPromise();
if (cached.error) throw cached.error;
const post = cached.data && cached.data.posts && cached.data.posts[0];

console.log(JSON.stringify({
  before,
  after: post ? post.counts.likes : null,
  viewerHasLiked: post ? post.viewerHasLiked : null,
  posts: cached.data && cached.data.posts ? cached.data.posts.filter(Boolean).length : 0,
  stale: !!cached.stale,
  requestsAfterMutation: requests - afterNetwork,
}));
