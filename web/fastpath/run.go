package fastpath

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
	"github.com/tally-dev/tally/resolvers/model"
)

// scratch is one response's reads; pooled, so a page allocates only its
// response bytes.
type scratch struct {
	ids    []engine.PostID
	views  []engine.PostView
	spans  []span // per root field
	users  []engine.UserID
	counts []engine.UserCounts
	unread engine.Unread
	kinds  []string // the store's reaction kinds, in display order
}

// span is what one root field read: posts ids[lo:hi], or one user.
type span struct {
	lo, hi int
	user   engine.UserID
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// run reads what the plan needs and encodes the response's data. ok is
// false when the operation must go to gqlgen: an argument gqlgen would
// reject, an anonymous viewer, or a failed read.
func (p *plan) run(ctx context.Context, store engine.Store, vars map[string]any, viewer engine.UserID) (data []byte, ok bool) {
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	if !p.read(ctx, sc, store, vars, viewer) {
		return nil, false
	}
	into, _ := ctx.Value(responseBufferKey{}).(*[]byte)
	var buf []byte
	start := 0
	if into != nil {
		buf, start = *into, len(*into)
	} else {
		buf = make([]byte, 0, p.sizeHint.Load()+64)
	}
	buf = append(buf, '{')
	for i := range p.root {
		if buf = p.writeRoot(buf, &p.root[i], sc, sc.spans[i], viewer); buf == nil {
			return nil, false // nothing appended to into
		}
	}
	buf = append(buf, '}')
	p.sizeHint.Store(int64(len(buf) - start))
	if into != nil {
		*into = buf
	}
	return buf[start:], true
}

type responseBufferKey struct{}

// WithResponseBuffer has the plan that answers the operation of ctx append
// the response's data to *buf (which the plan may grow, updating *buf)
// instead of allocating it: the HTTP transport hands in its pooled output
// buffer, already holding the response's beginning, so that the data is
// neither allocated nor copied once more. The caller owns *buf and must
// not reuse it while the response's Data is in use; it recognises data
// written there by its address.
func WithResponseBuffer(ctx context.Context, buf *[]byte) context.Context {
	return context.WithValue(ctx, responseBufferKey{}, buf)
}

func (p *plan) read(ctx context.Context, sc *scratch, store engine.Store, vars map[string]any, viewer engine.UserID) bool {
	sc.ids, sc.spans, sc.users = sc.ids[:0], sc.spans[:0], sc.users[:0]
	sc.kinds = store.ReactionKinds()
	wantUnread := false
	for i := range p.root {
		f := &p.root[i]
		s := span{lo: len(sc.ids)}
		switch f.kind {
		case rPosts:
			v, err := f.arg.Value(vars)
			list := graphql.CoerceList(v)
			if err != nil || v == nil || len(list) > engine.MaxIDsPerCall {
				return false
			}
			for _, x := range list {
				id, ok := parseID(x)
				if !ok {
					return false
				}
				sc.ids = append(sc.ids, engine.PostID(id))
			}
		case rPost:
			id, ok := argID(f, vars)
			if !ok {
				return false
			}
			sc.ids = append(sc.ids, engine.PostID(id))
		case rUser:
			id, ok := argID(f, vars)
			if !ok {
				return false
			}
			s.user = engine.UserID(id)
			if f.need.userCounts {
				sc.users = addUser(sc.users, s.user)
			}
		case rViewer:
			if viewer == 0 {
				return false // UNAUTHENTICATED, gqlgen's to report
			}
			s.user = viewer
			if f.need.userCounts {
				sc.users = addUser(sc.users, viewer)
			}
			wantUnread = wantUnread || f.need.unread
		}
		s.hi = len(sc.ids)
		sc.spans = append(sc.spans, s)
	}
	if cap(sc.views) < len(sc.ids) {
		sc.views = make([]engine.PostView, len(sc.ids))
	}
	sc.views = sc.views[:len(sc.ids)]
	for i := range p.root {
		f, s := &p.root[i], sc.spans[i]
		if f.kind != rPosts && f.kind != rPost {
			continue
		}
		views := sc.views[s.lo:s.hi]
		clear(views) // pooled: nothing of an earlier page may show
		if err := store.Page(ctx, viewer, sc.ids[s.lo:s.hi], f.need.page, views); err != nil {
			return false
		}
		if f.need.authorCounts {
			for _, v := range views {
				if v.Exists && v.Author != 0 {
					sc.users = addUser(sc.users, v.Author)
				}
			}
		}
	}
	sc.counts = sc.counts[:0]
	for lo := 0; lo < len(sc.users); lo += engine.MaxIDsPerCall {
		c, err := store.UserCounts(ctx, sc.users[lo:min(lo+engine.MaxIDsPerCall, len(sc.users))])
		if err != nil {
			return false
		}
		sc.counts = append(sc.counts, c...)
	}
	if len(sc.counts) != len(sc.users) {
		return false
	}
	if wantUnread {
		u, err := store.Unread(ctx, viewer)
		if err != nil {
			return false
		}
		sc.unread = u
	}
	return true
}

func argID(f *field, vars map[string]any) (uint64, bool) {
	v, err := f.arg.Value(vars)
	if err != nil || v == nil {
		return 0, false
	}
	return parseID(v)
}

// parseID reads an ID argument as gqlgen's coercion and the resolvers do:
// model.UnmarshalID (the schema's ID scalar, which refuses numbers above
// 2^53), then a positive decimal uint64. A refusal goes to gqlgen, which
// reports it.
func parseID(v any) (uint64, bool) {
	s, err := model.UnmarshalID(v)
	if err != nil {
		return 0, false
	}
	id, err := strconv.ParseUint(s, 10, 64)
	return id, err == nil && id != 0
}

func addUser(users []engine.UserID, u engine.UserID) []engine.UserID {
	for _, x := range users {
		if x == u {
			return users
		}
	}
	return append(users, u)
}

func (sc *scratch) userCounts(u engine.UserID) engine.UserCounts {
	for i, x := range sc.users {
		if x == u {
			return sc.counts[i]
		}
	}
	return engine.UserCounts{}
}

// writeRoot appends one root field; nil means the plan cannot encode it.
func (p *plan) writeRoot(buf []byte, f *field, sc *scratch, s span, viewer engine.UserID) []byte {
	buf = append(buf, f.key...)
	switch f.kind {
	case kTypename:
		return append(buf, f.lit...)
	case rPosts:
		buf = append(buf, '[')
		for i := s.lo; i < s.hi; i++ {
			if i > s.lo {
				buf = append(buf, ',')
			}
			buf = writePost(buf, f.obj, sc, sc.ids[i], &sc.views[i])
		}
		return append(buf, ']')
	case rPost:
		return writePost(buf, f.obj, sc, sc.ids[s.lo], &sc.views[s.lo])
	case rUser:
		return writeUser(buf, f.obj, sc, s.user)
	case rViewer:
		return writeViewer(buf, f.obj, sc, viewer, &sc.unread)
	}
	return nil
}

func writePost(buf []byte, fields []field, sc *scratch, id engine.PostID, v *engine.PostView) []byte {
	if !v.Exists {
		return append(buf, "null"...)
	}
	buf = append(buf, '{')
	for i := range fields {
		f := &fields[i]
		buf = append(buf, f.key...)
		switch f.kind {
		case kTypename:
			buf = append(buf, f.lit...)
		case pID:
			buf = appendID(buf, uint64(id))
		case pCreatedAt:
			buf = append(buf, '"')
			buf = snowflake.Time(uint64(id)).AppendFormat(buf, time.RFC3339Nano)
			buf = append(buf, '"')
		case pAuthor:
			if v.Author == 0 {
				buf = append(buf, "null"...)
			} else {
				buf = writeUser(buf, f.obj, sc, v.Author)
			}
		case pCounts:
			buf = writeCounts(buf, f.obj, id, &v.Counts)
		case pLiked:
			buf = strconv.AppendBool(buf, v.Liked)
		case pFavorited:
			buf = strconv.AppendBool(buf, v.Favorited)
		case pReactions:
			buf = append(buf, '[')
			for k, name := range sc.kinds {
				if k > 0 {
					buf = append(buf, ',')
				}
				buf = writeReaction(buf, f.obj, name, v.Reactions.Count[k])
			}
			buf = append(buf, ']')
		case pViewerReaction:
			if v.ViewerReaction == "" {
				buf = append(buf, "null"...)
			} else {
				buf = appendKind(buf, v.ViewerReaction)
			}
		}
	}
	return append(buf, '}')
}

func writeReaction(buf []byte, fields []field, kind string, count int64) []byte {
	buf = append(buf, '{')
	for i := range fields {
		f := &fields[i]
		buf = append(buf, f.key...)
		switch f.kind {
		case kTypename:
			buf = append(buf, f.lit...)
		case aKind:
			buf = appendKind(buf, kind)
		case aCount:
			buf = strconv.AppendInt(buf, count, 10)
		}
	}
	return append(buf, '}')
}

func writeCounts(buf []byte, fields []field, id engine.PostID, c *engine.Counts) []byte {
	buf = append(buf, '{')
	for i := range fields {
		f := &fields[i]
		buf = append(buf, f.key...)
		switch f.kind {
		case kTypename:
			buf = append(buf, f.lit...)
		case cID:
			buf = appendID(buf, uint64(id))
		case cLikes:
			buf = strconv.AppendInt(buf, c.Likes, 10)
		case cComments:
			buf = strconv.AppendInt(buf, c.Comments, 10)
		case cReposts:
			buf = strconv.AppendInt(buf, c.Reposts, 10)
		case cViews:
			buf = strconv.AppendInt(buf, c.Views, 10)
		case cFavorites:
			buf = strconv.AppendInt(buf, c.Favorites, 10)
		}
	}
	return append(buf, '}')
}

func writeUser(buf []byte, fields []field, sc *scratch, u engine.UserID) []byte {
	buf = append(buf, '{')
	var c engine.UserCounts
	for i := range fields {
		f := &fields[i]
		if f.kind == uPostCount || f.kind == uFollowerCount || f.kind == uFollowingCount {
			c = sc.userCounts(u)
			break
		}
	}
	for i := range fields {
		f := &fields[i]
		buf = append(buf, f.key...)
		switch f.kind {
		case kTypename:
			buf = append(buf, f.lit...)
		case uID:
			buf = appendID(buf, uint64(u))
		case uPostCount:
			buf = strconv.AppendInt(buf, c.Posts, 10)
		case uFollowerCount:
			buf = strconv.AppendInt(buf, c.Followers, 10)
		case uFollowingCount:
			buf = strconv.AppendInt(buf, c.Following, 10)
		}
	}
	return append(buf, '}')
}

func writeViewer(buf []byte, fields []field, sc *scratch, viewer engine.UserID, u *engine.Unread) []byte {
	buf = append(buf, '{')
	for i := range fields {
		f := &fields[i]
		buf = append(buf, f.key...)
		switch f.kind {
		case kTypename:
			buf = append(buf, f.lit...)
		case vID:
			buf = appendID(buf, uint64(viewer))
		case vUser:
			buf = writeUser(buf, f.obj, sc, viewer)
		case vUnread:
			buf = writeUnread(buf, f.obj, u)
		case vRedDot:
			buf = strconv.AppendBool(buf, u.RedDot)
		}
	}
	return append(buf, '}')
}

func writeUnread(buf []byte, fields []field, u *engine.Unread) []byte {
	buf = append(buf, '{')
	for i := range fields {
		f := &fields[i]
		buf = append(buf, f.key...)
		switch f.kind {
		case kTypename:
			buf = append(buf, f.lit...)
		case nMentions:
			buf = strconv.AppendInt(buf, u.Mentions, 10)
		case nComments:
			buf = strconv.AppendInt(buf, u.Comments, 10)
		case nLikes:
			buf = strconv.AppendInt(buf, u.Likes, 10)
		case nMessages:
			buf = strconv.AppendInt(buf, u.Messages, 10)
		case nSystem:
			buf = strconv.AppendInt(buf, u.System, 10)
		case nFeed:
			buf = strconv.AppendInt(buf, u.Feed, 10)
		case nTotal:
			buf = strconv.AppendInt(buf, u.Total(), 10)
		}
	}
	return append(buf, '}')
}

// appendKind writes a reaction kind's name as a JSON string. Names are
// a-z, 0-9 and _ (counters.ParseKinds): nothing to escape.
func appendKind(buf []byte, name string) []byte {
	buf = append(buf, '"')
	buf = append(buf, name...)
	return append(buf, '"')
}

// appendID writes an id as the quoted decimal string GraphQL clients see
// (model.FormatID).
func appendID(buf []byte, id uint64) []byte {
	buf = append(buf, '"')
	buf = strconv.AppendUint(buf, id, 10)
	return append(buf, '"')
}
