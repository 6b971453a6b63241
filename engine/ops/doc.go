// Package ops states Tally's product rules once. Each mutation of
// engine.Store is a type here (ReactToPost, Comment, Repost, SendMessage,
// MarkRead, ...) with two halves:
//
//   - Check validates and normalises the call's own input (ids, texts,
//     mentions), before the backend reads anything;
//   - Decide is a pure function from the operation and the facts its
//     backend read for it (does the post exist, who wrote it, was it
//     already liked, is the viewer a member, ...) to either a product
//     error (NOT_FOUND, FORBIDDEN, INVALID) or the Effects to apply.
//
// Effects are plain data in a small vocabulary: counter deltas on posts,
// unread bumps and resets on users, registrations of new posts, profile
// deltas, follow edges, a message's fan-out to a group, and the events
// subscribers are told about. A backend reads facts the way its storage
// allows (the embedded engine under its lock while applying a log record,
// the Redis backend inside or between its scripts), calls Decide, and
// applies what comes back; neither decides a rule itself, so the two
// cannot drift. The conformance suite (engine/enginetest) and its
// reference model (engine/enginetest/refmodel) judge both against the
// same scripts.
//
// Decide functions do not allocate beyond the Effects buffer they append
// to (one per backend, reused) and the user lists of the events they
// report; a Quiet buffer (replaying a log, where nobody listens) skips
// those too, so replay allocates nothing per record.
package ops
