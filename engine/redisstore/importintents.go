package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tally-dev/tally/engine"
)

// Import intents: a bulk import leaves no author's post count short.
//
// Import writes a chunk of rows in two steps, as a new post does: the
// posts' records in their buckets, then their authors' post counts in the
// user buckets. An import that died between the two (killed, or Redis
// gone) used to leave the posts registered and the counts never bumped,
// and a rerun could not mend it: it finds the posts known, and a known
// post's row grows no count (ops.DecideImport).
//
// An intent per bucket, written with the bucket's rows as a like's is,
// would cost a script call per bucket, and a history import leaves about
// one post per bucket: the import's Redis CPU doubled. So a chunk has one
// intent, field <chunk> of the hash "{s}imp", in three states:
//
//   - pending ('j'), written before the posts: the rows the chunk may
//     register whose author's count grows, as "<post>:<author>" pairs. It
//     is written again, with a fresh time, before every pipelined write
//     of the chunk's records.
//   - exact ('i'), swapped in (compare-and-set) once the writes have
//     answered: the rows they did register. Only then are counts bumped.
//   - gone: the counts are bumped, each user bucket once for the whole
//     chunk under the marker "<user bucket>o<chunk>b"; then the markers go.
//
// A sweeper finishes an exact intent like any other (after intentGrace,
// with the same markers). A pending one means the import died or failed
// while its records were being written, so no count was bumped: past importGrace,
// the sweeper bumps the authors of the listed posts that exist with the
// listed author. That is exact unless another writer registered one of
// the listed posts with the same author in the milliseconds between the
// import's read and its write, and the import died in those milliseconds
// too. importGrace is long because a pending intent is judged on the
// posts as they are: a sweeper must not judge it while the import may
// still write; an import that finds its pending intent claimed stops with
// an error.
const importGrace = 30 * time.Second

type importedPost struct {
	post, author uint64
}

var errBadImportIntent = errors.New("redisstore: malformed import intent")

func parseImported(list string) ([]importedPost, error) {
	if list == "" {
		return nil, errBadImportIntent
	}
	var out []importedPost
	for _, pair := range strings.Split(list, ",") {
		p, a, ok := strings.Cut(pair, ":")
		post, err1 := strconv.ParseUint(p, 10, 64)
		author, err2 := strconv.ParseUint(a, 10, 64)
		if !ok || err1 != nil || err2 != nil || post == 0 || author == 0 {
			return nil, errBadImportIntent
		}
		out = append(out, importedPost{post, author})
	}
	return out, nil
}

// importTag is how an import intent lists a row.
func importTag(post, author uint64) string {
	return strconv.FormatUint(post, 10) + ":" + strconv.FormatUint(author, 10)
}

// importIntent is an import chunk's intent as its import keeps it.
type importIntent struct {
	store *Store
	chunk string
	value string // as stored; "" before the first write
	tags  []string
	seen  map[engine.PostID]bool
}

func (s *Store) newImportIntent() *importIntent {
	return &importIntent{store: s, chunk: newIntentID(), seen: map[engine.PostID]bool{}}
}

// add lists a row the chunk may register whose author's count grows.
func (ii *importIntent) add(post engine.PostID, author engine.UserID) {
	if !ii.seen[post] {
		ii.seen[post] = true
		ii.tags = append(ii.tags, importTag(uint64(post), uint64(author)))
	}
}

// pend writes the pending intent with the rows listed so far, dated now:
// the import is about to write records.
func (ii *importIntent) pend(ctx context.Context) error {
	if len(ii.tags) == 0 {
		return nil
	}
	return ii.swap(ctx, ii.encode(intentImportPending, ii.tags))
}

func (ii *importIntent) encode(kind byte, tags []string) string {
	s := ii.store
	return intent{kind: kind, at: s.now().UnixMilli()}.encode() + strings.Join(tags, ",")
}

// swap replaces the intent's value by next ("" deletes it), if nobody
// claimed it meanwhile.
func (ii *importIntent) swap(ctx context.Context, next string) error {
	s := ii.store
	var c *call
	switch {
	case ii.value == "" && next == "":
		return nil
	case ii.value == "":
		c = raw("HSETNX", s.k.importIntents(), ii.chunk, next)
	case next == "":
		c = script(scIntentDone, []string{s.k.importIntents()}, ii.chunk, ii.value)
	default:
		c = script(scIntentClaim, []string{s.k.importIntents()}, ii.chunk, ii.value, next)
	}
	if err := s.exec(ctx, c); err != nil {
		return err
	}
	if num(c.res.Val()) != 1 {
		return s.fail(errors.New("import: stalled past its intents' grace period, and a sweeper took over a chunk; its authors' post counts may be off by its rows"))
	}
	ii.value = next
	return nil
}

// finish records what the chunk registered (rows: the posts whose
// author's count grows, with those authors), bumps those counts and
// deletes the intent and then the markers.
func (ii *importIntent) finish(ctx context.Context, registered []importedPost) error {
	if len(registered) == 0 {
		return ii.swap(ctx, "")
	}
	tags := make([]string, len(registered))
	for i, r := range registered {
		tags[i] = importTag(r.post, r.author)
	}
	if err := ii.swap(ctx, ii.encode(intentImport, tags)); err != nil {
		return err
	}
	maybeCrash(intentImport)
	return ii.store.finishImport(ctx, ii.chunk, ii.value, registered, true)
}

// finishImport bumps the post counts of chunk's registered rows, then
// deletes its intent if it still holds value. own says the import that
// wrote it finishes it: when it deleted the intent unclaimed, nobody else
// can run it, and it deletes the markers too.
func (s *Store) finishImport(ctx context.Context, chunk, value string, registered []importedPost, own bool) error {
	bumps := make([]bump, len(registered))
	for i, r := range registered {
		bumps[i] = bump{r.author, uPosts, 1}
	}
	if err := s.bumpUsersMarked(ctx, chunk, "b", bumps); err != nil {
		return err
	}
	r, err := s.one(ctx, scIntentDone, []string{s.k.importIntents()}, chunk, value)
	if err != nil || !own || num(r) != 1 {
		return err
	}
	return s.exec(ctx, s.bumpMarkerDels(bumps, chunk+"b")...)
}

// sweepImports finishes the import chunks whose imports died: exact
// intents past intentGrace, pending ones past importGrace. It returns how
// many it finished.
func (s *Store) sweepImports(ctx context.Context, now int64) (int, error) {
	all, err := s.wdb.HGetAll(ctx, s.k.importIntents()).Result()
	if err != nil {
		return 0, s.fail(err)
	}
	done := 0
	for chunk, value := range all {
		raw, in, ok, err := claimable(value, now)
		if err != nil {
			return done, s.fail(err)
		}
		if !ok {
			continue
		}
		claimed, ok, err := s.claim(ctx, s.k.importIntents(), chunk, value, raw, now)
		if err != nil {
			return done, err
		}
		if !ok {
			continue
		}
		registered := in.imported
		if in.kind == intentImportPending {
			if registered, err = s.registeredOf(ctx, in.imported); err != nil {
				return done, err
			}
		}
		if err := s.finishImport(ctx, chunk, claimed, registered, false); err != nil {
			return done, err
		}
		done++
	}
	return done, nil
}

// registeredOf are the rows of a pending import intent whose post is
// registered with the listed author.
func (s *Store) registeredOf(ctx context.Context, rows []importedPost) ([]importedPost, error) {
	reads := make([]*redis.StringCmd, len(rows))
	if err := s.read(ctx, func(p redis.Pipeliner) {
		for i, r := range rows {
			b, low := s.k.post(r.post)
			reads[i] = p.HGet(ctx, b, low)
		}
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []importedPost
	for i, r := range rows {
		rec, err := reads[i].Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err != nil {
			return nil, s.fail(err)
		}
		if author, err := decodeHead(rec); err == nil && author == r.author {
			out = append(out, r)
		} else if err != nil {
			return nil, s.fail(err)
		}
	}
	return out, nil
}
