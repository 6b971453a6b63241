package fastpath

import (
	"slices"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"

	"github.com/tally-dev/tally/engine"
)

// An operation's @skip and @include values decide which fields it selects,
// so its plans are compiled per combination of those values (its mask):
// each variant is built with gqlgen's own graphql.CollectFields under the
// variables that produced the mask, which makes field order, merging of
// duplicate fields and fragment handling gqlgen's by construction.

// maxConditions and maxVariants bound what one operation may compile to;
// past them the operation goes to gqlgen.
const (
	maxConditions = 64
	maxVariants   = 32
)

// opPlans are the compiled variants of one operation.
type opPlans struct {
	ineligible bool
	conds      []*ast.Directive // @skip/@include reachable from the operation

	mu       sync.RWMutex
	variants map[uint64]*plan // nil value: this variant goes to gqlgen
}

func newOpPlans(op *ast.OperationDefinition, doc *ast.QueryDocument) *opPlans {
	o := &opPlans{variants: make(map[uint64]*plan)}
	if op.Operation != ast.Query && op.Operation != ast.Subscription || len(op.Directives) > 0 {
		o.ineligible = true
		return o
	}
	seen := map[string]bool{}
	var walk func(ast.SelectionSet) bool
	cond := func(ds ast.DirectiveList) bool {
		for _, d := range ds {
			if d.Name != "skip" && d.Name != "include" {
				return false
			}
			o.conds = append(o.conds, d)
		}
		return true
	}
	walk = func(set ast.SelectionSet) bool {
		for _, sel := range set {
			switch sel := sel.(type) {
			case *ast.Field:
				if !cond(sel.Directives) || !walk(sel.SelectionSet) {
					return false
				}
			case *ast.InlineFragment:
				if !cond(sel.Directives) || !walk(sel.SelectionSet) {
					return false
				}
			case *ast.FragmentSpread:
				if !cond(sel.Directives) {
					return false
				}
				if seen[sel.Name] {
					continue
				}
				seen[sel.Name] = true
				f := doc.Fragments.ForName(sel.Name)
				if f == nil || len(f.Directives) > 0 || !walk(f.SelectionSet) {
					return false
				}
			default:
				return false
			}
		}
		return true
	}
	if !walk(op.SelectionSet) || len(o.conds) > maxConditions {
		o.ineligible = true
	}
	return o
}

// mask evaluates the operation's conditions under vars.
func (o *opPlans) mask(vars map[string]any) (uint64, bool) {
	var m uint64
	for i, d := range o.conds {
		arg := d.Arguments.ForName("if")
		if arg == nil {
			return 0, false
		}
		v, err := arg.Value.Value(vars)
		b, ok := v.(bool)
		if err != nil || !ok {
			return 0, false
		}
		if b {
			m |= 1 << i
		}
	}
	return m, true
}

// variant returns the plan for mask, compiling it under opCtx's variables
// (which produced mask) the first time.
func (o *opPlans) variant(mask uint64, opCtx *graphql.OperationContext) *plan {
	o.mu.RLock()
	p, ok := o.variants[mask]
	n := len(o.variants)
	o.mu.RUnlock()
	if ok {
		return p
	}
	if n >= maxVariants {
		return nil
	}
	p = compile(opCtx)
	o.mu.Lock()
	if prev, ok := o.variants[mask]; ok {
		p = prev
	} else {
		o.variants[mask] = p
	}
	o.mu.Unlock()
	return p
}

// kind is what a compiled field writes.
type kind uint8

const (
	kTypename kind = iota // the literal in field.lit

	// Query and Subscription root fields.
	rPosts
	rPost
	rViewer
	rUser
	rUnreadChanged

	// Post
	pID
	pCreatedAt
	pAuthor
	pCounts
	pLiked
	pFavorited
	pReactions
	pViewerReaction

	// ReactionCount
	aKind
	aCount

	// PostCounts
	cID
	cLikes
	cComments
	cReposts
	cViews
	cFavorites

	// User
	uID
	uPostCount
	uFollowerCount
	uFollowingCount

	// Viewer
	vID
	vUser
	vUnread
	vRedDot

	// Unread
	nMentions
	nComments
	nLikes
	nMessages
	nSystem
	nFeed
	nTotal
)

// The plain data fields of each type the fast path serves, and the
// objects they lead to.
var (
	postFields = map[string]kind{"id": pID, "createdAt": pCreatedAt, "author": pAuthor, "counts": pCounts,
		"viewerHasLiked": pLiked, "viewerHasFavorited": pFavorited, "reactions": pReactions,
		"viewerReaction": pViewerReaction}
	reactionFields = map[string]kind{"kind": aKind, "count": aCount}
	countsFields   = map[string]kind{"id": cID, "likes": cLikes, "comments": cComments, "reposts": cReposts,
		"views": cViews, "favorites": cFavorites}
	userFields = map[string]kind{"id": uID, "postCount": uPostCount, "followerCount": uFollowerCount,
		"followingCount": uFollowingCount}
	viewerFields = map[string]kind{"id": vID, "user": vUser, "unread": vUnread, "redDot": vRedDot}
	unreadFields = map[string]kind{"mentions": nMentions, "comments": nComments, "likes": nLikes,
		"messages": nMessages, "system": nSystem, "feed": nFeed, "total": nTotal}
	queryFields = map[string]kind{"posts": rPosts, "post": rPost, "viewer": rViewer, "user": rUser}
	subFields   = map[string]kind{"unreadChanged": rUnreadChanged}
)

// object types by name: their fields and the objects those fields lead to.
var objects = map[string]struct {
	fields map[string]kind
	child  map[kind]string
}{
	"Query":         {queryFields, map[kind]string{rPosts: "Post", rPost: "Post", rViewer: "Viewer", rUser: "User"}},
	"Subscription":  {subFields, map[kind]string{rUnreadChanged: "Viewer"}},
	"Post":          {postFields, map[kind]string{pAuthor: "User", pCounts: "PostCounts", pReactions: "ReactionCount"}},
	"ReactionCount": {reactionFields, nil},
	"PostCounts":    {countsFields, nil},
	"User":          {userFields, nil},
	"Viewer":        {viewerFields, map[kind]string{vUser: "User", vUnread: "Unread"}},
	"Unread":        {unreadFields, nil},
}

// field is one compiled field: its key as written (with the comma before
// it unless it is its object's first), what it writes, and for objects
// their fields.
type field struct {
	key  []byte
	kind kind
	lit  []byte       // __typename's value
	arg  *ast.Value   // a root field's id or ids argument
	obj  []field      // the selection of an object field
	need requirements // for root fields: what must be read
}

// requirements are the reads a root field's selection needs.
type requirements struct {
	page         engine.PageWant
	authorCounts bool // Post.author's counters
	userCounts   bool // User's counters (user, viewer.user)
	unread       bool // viewer.unread or viewer.redDot
}

// plan is one compiled variant of an operation.
type plan struct {
	root     []field
	sizeHint atomic.Int64 // the last response's size, to allocate once
	// For a subscription whose selection shows nothing of the viewer but
	// badges (no id, no user): the last push encoded, which every viewer
	// with the same badges shares. A broadcast changes most viewers'
	// badges to the same few values, so most pushes of a broadcast are
	// encoded once.
	anonymous bool
	shared    atomic.Pointer[sharedPush]
}

// sharedPush is a push's encoding and the badges it shows.
type sharedPush struct {
	unread engine.Unread
	data   []byte
}

// compile builds the plan of opCtx's operation under its variables, or
// returns nil when any selected field is not plain data.
func compile(opCtx *graphql.OperationContext) *plan {
	typ := "Query"
	if opCtx.Operation.Operation == ast.Subscription {
		typ = "Subscription"
	}
	root, ok := compileObject(opCtx, opCtx.Operation.SelectionSet, typ, nil)
	if !ok || len(root) == 0 {
		return nil
	}
	if typ == "Subscription" {
		// gqlgen answers any other shape with an error, and a push
		// encodes only what the resolver read: the viewer's badges.
		if len(root) != 1 || root[0].kind != rUnreadChanged || root[0].need.userCounts {
			return nil
		}
		return &plan{root: root, anonymous: !selects(root[0].obj, vID, vUser)}
	}
	return &plan{root: root}
}

// selects reports whether fields select any of kinds.
func selects(fields []field, kinds ...kind) bool {
	for _, f := range fields {
		if slices.Contains(kinds, f.kind) {
			return true
		}
	}
	return false
}

func compileObject(opCtx *graphql.OperationContext, sel ast.SelectionSet, typ string, need *requirements) ([]field, bool) {
	obj := objects[typ]
	collected := graphql.CollectFields(opCtx, sel, []string{typ})
	out := make([]field, 0, len(collected))
	for i, cf := range collected {
		key := make([]byte, 0, len(cf.Alias)+4)
		if i > 0 {
			key = append(key, ',')
		}
		key = strconv.AppendQuote(key, cf.Alias)
		key = append(key, ':')
		f := field{key: key}
		if cf.Name == "__typename" {
			f.kind = kTypename
			f.lit = strconv.AppendQuote(nil, typ)
			out = append(out, f)
			continue
		}
		k, ok := obj.fields[cf.Name]
		if !ok {
			return nil, false
		}
		f.kind = k
		isRoot := typ == "Query" || typ == "Subscription"
		if isRoot {
			need = &f.need
			switch k {
			case rPosts:
				f.arg = argValue(cf.Field, "ids")
			case rPost, rUser:
				f.arg = argValue(cf.Field, "id")
			}
			if (k == rPosts || k == rPost || k == rUser) && f.arg == nil {
				return nil, false
			}
		}
		switch k {
		case pCounts:
			need.page.Counts = true
		case pLiked:
			need.page.Liked = true
		case pFavorited:
			need.page.Favorited = true
		case pReactions:
			need.page.Reactions = true
		case pViewerReaction:
			need.page.ViewerReaction = true
		case uPostCount, uFollowerCount, uFollowingCount:
			need.userCounts = true
		case vUnread, vRedDot:
			need.unread = true
		}
		if child, isObj := obj.child[k]; isObj {
			var sub []field
			if k == pAuthor {
				// An author's counters are read for the whole page.
				var authorNeed requirements
				sub, ok = compileObject(opCtx, cf.Selections, child, &authorNeed)
				need.authorCounts = need.authorCounts || authorNeed.userCounts
			} else {
				sub, ok = compileObject(opCtx, cf.Selections, child, need)
			}
			if !ok {
				return nil, false
			}
			f.obj = sub
		}
		out = append(out, f)
	}
	return out, true
}

func argValue(f *ast.Field, name string) *ast.Value {
	if a := f.Arguments.ForName(name); a != nil {
		return a.Value
	}
	return nil
}
