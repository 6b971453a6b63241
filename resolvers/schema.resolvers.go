package resolvers

import (
	"context"
	"slices"
	"strconv"

	"github.com/graph-gophers/dataloader/v7"

	"github.com/99designs/gqlgen/graphql"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/graph"
	gmodel "github.com/tally-dev/tally/graph/model"
	"github.com/tally-dev/tally/loaders"
	"github.com/tally-dev/tally/resolvers/model"
	"github.com/tally-dev/tally/web/auth"
)

func (r *Resolver) Query() graph.QueryResolver               { return (*queryResolver)(r) }
func (r *Resolver) Mutation() graph.MutationResolver         { return (*mutationResolver)(r) }
func (r *Resolver) Subscription() graph.SubscriptionResolver { return (*subscriptionResolver)(r) }
func (r *Resolver) User() graph.UserResolver                 { return (*userResolver)(r) }
func (r *Resolver) Viewer() graph.ViewerResolver             { return (*viewerResolver)(r) }
func (r *Resolver) Message() graph.MessageResolver           { return (*messageResolver)(r) }
func (r *Resolver) ReadReceipts() graph.ReadReceiptsResolver { return (*readReceiptsResolver)(r) }
func (r *Resolver) Group() graph.GroupResolver               { return (*groupResolver)(r) }

type (
	queryResolver        Resolver
	mutationResolver     Resolver
	subscriptionResolver Resolver
	userResolver         Resolver
	viewerResolver       Resolver
	messageResolver      Resolver
	readReceiptsResolver Resolver
	groupResolver        Resolver
)

// viewerOf returns the signed-in user; the @auth directive has already
// rejected anonymous callers where one is required.
func viewerOf(ctx context.Context) engine.UserID {
	p, _ := auth.From(ctx)
	return p.User
}

// actorOf is the viewer as the engine judges ownership: an admin or a
// service token may delete what the user does not own.
func actorOf(ctx context.Context) engine.Actor {
	p, _ := auth.From(ctx)
	return engine.Actor{User: p.User, Privileged: trusted(p)}
}

// ---- Query ----

func (r *queryResolver) Viewer(ctx context.Context) (*model.Viewer, error) {
	return &model.Viewer{UserID: viewerOf(ctx)}, nil
}

func (r *queryResolver) Post(ctx context.Context, id string) (*model.Post, error) {
	pid, err := parseID[engine.PostID]("post id", id)
	if err != nil {
		return nil, err
	}
	posts, err := loadPage(ctx, []engine.PostID{pid})
	if err != nil {
		return nil, err
	}
	return posts[0], nil
}

func (r *queryResolver) Posts(ctx context.Context, ids []string) ([]*model.Post, error) {
	pids, err := parseIDs[engine.PostID]("post id", ids)
	if err != nil {
		return nil, err
	}
	return loadPage(ctx, pids)
}

// loadPage resolves a page of posts (nil for unknown ids). It reads what
// the selection needs for the whole page up front — the registry, and the
// counts and flags when asked for — with one engine operation (Store.Page),
// and fills the posts with it, so nothing is read per post and a page costs
// the same number of engine calls whatever its size. The authors'
// counters, when selected, go into the response's loader as one more
// multi-get.
func loadPage(ctx context.Context, ids []engine.PostID) ([]*model.Post, error) {
	l := loaders.For(ctx)
	var want engine.PageWant
	var wantAuthorCounts bool
	for _, f := range graphql.CollectFieldsCtx(ctx, nil) {
		switch f.Name {
		case "counts":
			want.Counts = true
		case "viewerHasLiked":
			want.Liked = true
		case "viewerHasFavorited":
			want.Favorited = true
		case "reactions":
			want.Reactions = true
		case "viewerReaction":
			want.ViewerReaction = true
		case "author":
			for _, af := range graphql.CollectFields(graphql.GetOperationContext(ctx), f.Selections, []string{"User"}) {
				wantAuthorCounts = wantAuthorCounts || af.Name != "id" && af.Name != "__typename"
			}
		}
	}
	views := make([]engine.PostView, len(ids))
	if err := l.Store.Page(ctx, viewerOf(ctx), ids, want, views); err != nil {
		return nil, err
	}
	out := make([]*model.Post, len(ids))
	posts := make([]model.Post, len(ids))
	var authors []engine.UserID
	for i, v := range views {
		if !v.Exists {
			continue
		}
		p := &posts[i]
		*p = model.Post{PostID: ids[i], AuthorID: v.Author, CountValues: v.Counts,
			ViewerHasLiked: v.Liked, ViewerHasFavorited: v.Favorited, ViewerKind: v.ViewerReaction}
		if want.Reactions {
			p.Kinds, p.ReactionValues = l.Store.ReactionKinds(), &views[i].Reactions
		}
		out[i] = p
		if wantAuthorCounts && v.Author != 0 && !slices.Contains(authors, v.Author) {
			authors = append(authors, v.Author)
		}
	}
	if len(authors) > 0 {
		if err := primeMany(ctx, l.UserCounts(), authors, l.Store.UserCounts); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// primeMany reads keys with one call to get and primes loader with them.
func primeMany[K comparable, V any](ctx context.Context, loader *dataloader.Loader[K, V], keys []K, get func(context.Context, []K) ([]V, error)) error {
	vals, err := get(ctx, keys)
	if err != nil {
		return err
	}
	for i, k := range keys {
		loader.Prime(ctx, k, vals[i])
	}
	return nil
}

func (r *queryResolver) User(ctx context.Context, id string) (*model.User, error) {
	uid, err := parseID[engine.UserID]("user id", id)
	if err != nil {
		return nil, err
	}
	return &model.User{UserID: uid}, nil
}

func (r *queryResolver) Message(ctx context.Context, id string) (*model.Message, error) {
	mid, err := parseID[engine.MessageID]("message id", id)
	if err != nil {
		return nil, err
	}
	m, err := r.Store.Message(ctx, viewerOf(ctx), mid)
	if err != nil {
		return nil, err
	}
	return &model.Message{M: m}, nil
}

func (r *queryResolver) Group(ctx context.Context, id string) (*model.Group, error) {
	gid, err := parseID[engine.GroupID]("group id", id)
	if err != nil {
		return nil, err
	}
	return (*Resolver)(r).group(ctx, gid)
}

func (r *Resolver) group(ctx context.Context, id engine.GroupID) (*model.Group, error) {
	g, err := r.Store.Group(ctx, viewerOf(ctx), id)
	if err != nil {
		return nil, err
	}
	return &model.Group{G: g}, nil
}

func (r *queryResolver) SystemNotifications(ctx context.Context, first *int, after *string) ([]model.SystemNotification, error) {
	n := engine.DefaultNotificationPageSize
	if first != nil {
		n = *first
	}
	var cursor engine.NotificationID
	if after != nil {
		var err error
		if cursor, err = parseID[engine.NotificationID]("after", *after); err != nil {
			return nil, err
		}
	}
	list, err := r.Store.Notifications(ctx, n, cursor)
	if err != nil {
		return nil, err
	}
	out := make([]model.SystemNotification, len(list))
	for i, n := range list {
		out[i] = model.SystemNotification{N: n}
	}
	return out, nil
}

// ---- User, Viewer ----

func (r *userResolver) userCounts(ctx context.Context, u *model.User) (engine.UserCounts, error) {
	return loaders.For(ctx).UserCounts().Load(ctx, u.UserID)()
}

func (r *userResolver) PostCount(ctx context.Context, u *model.User) (int64, error) {
	c, err := r.userCounts(ctx, u)
	return c.Posts, err
}

func (r *userResolver) FollowerCount(ctx context.Context, u *model.User) (int64, error) {
	c, err := r.userCounts(ctx, u)
	return c.Followers, err
}

func (r *userResolver) FollowingCount(ctx context.Context, u *model.User) (int64, error) {
	c, err := r.userCounts(ctx, u)
	return c.Following, err
}

func (r *viewerResolver) User(ctx context.Context, v *model.Viewer) (*model.User, error) {
	return &model.User{UserID: v.UserID}, nil
}

func (r *viewerResolver) Unread(ctx context.Context, v *model.Viewer) (*engine.Unread, error) {
	return unreadOf(ctx, v)
}

func (r *viewerResolver) RedDot(ctx context.Context, v *model.Viewer) (bool, error) {
	u, err := unreadOf(ctx, v)
	if err != nil {
		return false, err
	}
	return u.RedDot, nil
}

func unreadOf(ctx context.Context, v *model.Viewer) (*engine.Unread, error) {
	if v.Unread != nil {
		return v.Unread, nil
	}
	u, err := loaders.For(ctx).Unread().Load(ctx, v.UserID)()
	return &u, err
}

// ---- Groups and messages ----

func (r *messageResolver) Group(ctx context.Context, m *model.Message) (*model.Group, error) {
	return (*Resolver)(r).group(ctx, m.M.Group)
}

func (r *messageResolver) Sender(ctx context.Context, m *model.Message) (*model.User, error) {
	return &model.User{UserID: m.M.Sender}, nil
}

func (r *messageResolver) ReadReceipts(ctx context.Context, m *model.Message) (*model.ReadReceipts, error) {
	return (*Resolver)(r).receipts(ctx, m.M.ID)
}

// receipts reads a message's receipts with as many readers and unreaders
// as the selection asks for (the largest `first` among them).
func (r *Resolver) receipts(ctx context.Context, id engine.MessageID) (*model.ReadReceipts, error) {
	limit := 0
	for _, f := range graphql.CollectFieldsCtx(ctx, nil) {
		if f.Name != "readers" && f.Name != "unreaders" {
			continue
		}
		n := engine.DefaultMemberPageSize
		if arg := f.Arguments.ForName("first"); arg != nil {
			v, err := arg.Value.Value(graphql.GetOperationContext(ctx).Variables)
			if err != nil {
				return nil, Errorf(CodeBadUserInput, "first: %v", err)
			}
			if i, ok := v.(int64); ok {
				n = int(i)
			}
		}
		limit = max(limit, min(n, engine.MaxGroupMembers))
	}
	viewer := viewerOf(ctx)
	rec, err := r.Store.Receipts(ctx, viewer, id, limit)
	if err != nil {
		return nil, err
	}
	return &model.ReadReceipts{Message: id, Viewer: viewer, R: rec}, nil
}

func (r *readReceiptsResolver) Readers(ctx context.Context, rr *model.ReadReceipts, first *int, after *string) ([]model.User, error) {
	return r.receiptPage(ctx, rr, true, first, after)
}

func (r *readReceiptsResolver) Unreaders(ctx context.Context, rr *model.ReadReceipts, first *int, after *string) ([]model.User, error) {
	return r.receiptPage(ctx, rr, false, first, after)
}

// receiptPage answers a first page from what receipts read with the
// counts; a later page is one engine call from the cursor.
func (r *readReceiptsResolver) receiptPage(ctx context.Context, rr *model.ReadReceipts, readers bool, first *int, after *string) ([]model.User, error) {
	n, cursor, err := pageArgs(first, after)
	if err != nil {
		return nil, err
	}
	if cursor == 0 {
		ids := rr.R.Unreaders
		if readers {
			ids = rr.R.Readers
		}
		return usersOf(ids, &n)
	}
	ids, err := r.Store.ReceiptMembers(ctx, rr.Viewer, rr.Message, readers, n, cursor)
	if err != nil {
		return nil, err
	}
	return usersOf(ids, nil)
}

// Members answers the first page from Group's read when it covers it, and
// any other page with one engine call from the cursor.
func (r *groupResolver) Members(ctx context.Context, g *model.Group, first *int, after *string) ([]model.User, error) {
	n, cursor, err := pageArgs(first, after)
	if err != nil {
		return nil, err
	}
	if page, ok := g.Page(n, cursor); ok {
		return usersOf(page, &n)
	}
	ids, err := r.Store.GroupMembers(ctx, viewerOf(ctx), g.G.ID, n, cursor)
	if err != nil {
		return nil, err
	}
	return usersOf(ids, nil)
}

// pageArgs checks a paged list of members' arguments: first (null:
// engine.DefaultMemberPageSize) and the user-id cursor after (null: from
// the start).
func pageArgs(first *int, after *string) (int, engine.UserID, error) {
	n := engine.DefaultMemberPageSize
	if first != nil {
		n = *first
	}
	if err := engine.CheckPage(n); err != nil {
		return 0, 0, err
	}
	var cursor engine.UserID
	if after != nil {
		c, err := parseID[engine.UserID]("after", *after)
		if err != nil {
			return 0, 0, err
		}
		cursor = c
	}
	return n, cursor, nil
}

func usersOf(ids []engine.UserID, first *int) ([]model.User, error) {
	n := len(ids)
	if first != nil {
		if *first < 0 {
			return nil, Errorf(CodeBadUserInput, "first must not be negative")
		}
		n = min(n, *first)
	}
	out := make([]model.User, n)
	for i := range out {
		out[i] = model.User{UserID: ids[i]}
	}
	return out, nil
}

// ---- Mutations ----

// post returns a known post after a mutation, or NOT_FOUND.
func (r *mutationResolver) post(ctx context.Context, id engine.PostID) (*model.Post, error) {
	posts, err := loadPage(ctx, []engine.PostID{id})
	if err != nil {
		return nil, err
	}
	if posts[0] == nil {
		return nil, Errorf(CodeNotFound, "post %d not found", id)
	}
	return posts[0], nil
}

// postOp runs a mutation on one existing post and returns the post.
func (r *mutationResolver) postOp(ctx context.Context, postID string, op func(context.Context, engine.UserID, engine.PostID) error) (*model.Post, error) {
	pid, err := parseID[engine.PostID]("postId", postID)
	if err != nil {
		return nil, err
	}
	if err := op(ctx, viewerOf(ctx), pid); err != nil {
		return nil, err
	}
	return r.post(ctx, pid)
}

func (r *mutationResolver) CreatePost(ctx context.Context, id *string, idempotencyKey *string) (*model.Post, error) {
	var pid engine.PostID
	if id != nil {
		var err error
		if pid, err = parseID[engine.PostID]("id", *id); err != nil {
			return nil, err
		}
	}
	pid, err := r.Store.CreatePost(ctx, viewerOf(ctx), pid, deref(idempotencyKey))
	if err != nil {
		return nil, err
	}
	return r.post(ctx, pid)
}

func (r *mutationResolver) LikePost(ctx context.Context, postID string) (*model.Post, error) {
	return r.postOp(ctx, postID, r.Store.Like)
}

func (r *mutationResolver) UnlikePost(ctx context.Context, postID string) (*model.Post, error) {
	return r.postOp(ctx, postID, r.Store.Unlike)
}

func (r *mutationResolver) ReactToPost(ctx context.Context, postID string, kind string) (*model.Post, error) {
	return r.postOp(ctx, postID, func(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
		return r.Store.ReactToPost(ctx, viewer, post, kind)
	})
}

func (r *mutationResolver) UnreactToPost(ctx context.Context, postID string) (*model.Post, error) {
	return r.postOp(ctx, postID, r.Store.UnreactToPost)
}

func (r *mutationResolver) FavoritePost(ctx context.Context, postID string) (*model.Post, error) {
	return r.postOp(ctx, postID, r.Store.Favorite)
}

func (r *mutationResolver) UnfavoritePost(ctx context.Context, postID string) (*model.Post, error) {
	return r.postOp(ctx, postID, r.Store.Unfavorite)
}

func (r *mutationResolver) CommentOnPost(ctx context.Context, postID string, commentID *string, mentions []string, idempotencyKey *string) (*model.Post, error) {
	var comment engine.CommentID
	if commentID != nil {
		var err error
		if comment, err = parseID[engine.CommentID]("commentId", *commentID); err != nil {
			return nil, err
		}
	}
	users, err := parseIDs[engine.UserID]("mention", mentions)
	if err != nil {
		return nil, err
	}
	return r.postOp(ctx, postID, func(ctx context.Context, viewer engine.UserID, post engine.PostID) error {
		return r.Store.Comment(ctx, viewer, post, comment, users, deref(idempotencyKey))
	})
}

func (r *mutationResolver) DeleteComment(ctx context.Context, postID string, commentID string) (*model.Post, error) {
	comment, err := parseID[engine.CommentID]("commentId", commentID)
	if err != nil {
		return nil, err
	}
	return r.postOp(ctx, postID, func(ctx context.Context, _ engine.UserID, post engine.PostID) error {
		return r.Store.DeleteComment(ctx, actorOf(ctx), post, comment)
	})
}

func (r *mutationResolver) DeletePost(ctx context.Context, postID string) (string, error) {
	pid, err := parseID[engine.PostID]("postId", postID)
	if err != nil {
		return "", err
	}
	if err := r.Store.DeletePost(ctx, actorOf(ctx), pid); err != nil {
		return "", err
	}
	return strconv.FormatUint(uint64(pid), 10), nil
}

func (r *mutationResolver) RepostPost(ctx context.Context, postID string, mentions []string, idempotencyKey *string) (*model.Post, error) {
	pid, err := parseID[engine.PostID]("postId", postID)
	if err != nil {
		return nil, err
	}
	users, err := parseIDs[engine.UserID]("mention", mentions)
	if err != nil {
		return nil, err
	}
	repost, err := r.Store.Repost(ctx, viewerOf(ctx), pid, users, deref(idempotencyKey))
	if err != nil {
		return nil, err
	}
	return r.post(ctx, repost)
}

func (r *mutationResolver) RecordViews(ctx context.Context, postIds []string) (bool, error) {
	pids, err := parseIDs[engine.PostID]("post id", postIds)
	if err != nil {
		return false, err
	}
	return true, r.Store.RecordViews(ctx, pids)
}

func (r *mutationResolver) viewerOp(ctx context.Context, op func(engine.UserID) error) (*model.Viewer, error) {
	v := viewerOf(ctx)
	if err := op(v); err != nil {
		return nil, err
	}
	return &model.Viewer{UserID: v}, nil
}

func (r *mutationResolver) Follow(ctx context.Context, userID string) (*model.Viewer, error) {
	target, err := parseID[engine.UserID]("userId", userID)
	if err != nil {
		return nil, err
	}
	return r.viewerOp(ctx, func(v engine.UserID) error { return r.Store.Follow(ctx, v, target) })
}

func (r *mutationResolver) Unfollow(ctx context.Context, userID string) (*model.Viewer, error) {
	target, err := parseID[engine.UserID]("userId", userID)
	if err != nil {
		return nil, err
	}
	return r.viewerOp(ctx, func(v engine.UserID) error { return r.Store.Unfollow(ctx, v, target) })
}

var unreadKinds = map[gmodel.UnreadKind]engine.UnreadKind{
	gmodel.UnreadKindMentions: engine.Mentions,
	gmodel.UnreadKindComments: engine.Comments,
	gmodel.UnreadKindLikes:    engine.Likes,
	gmodel.UnreadKindMessages: engine.Messages,
	gmodel.UnreadKindSystem:   engine.System,
	gmodel.UnreadKindFeed:     engine.Feed,
}

func (r *mutationResolver) MarkRead(ctx context.Context, kind gmodel.UnreadKind) (*model.Viewer, error) {
	k, ok := unreadKinds[kind]
	if !ok {
		return nil, Errorf(CodeBadUserInput, "unknown UnreadKind %q", kind)
	}
	return r.viewerOp(ctx, func(v engine.UserID) error { return r.Store.MarkRead(ctx, v, k) })
}

func (r *mutationResolver) ClickRedDot(ctx context.Context) (*model.Viewer, error) {
	return r.viewerOp(ctx, func(v engine.UserID) error { return r.Store.ClickRedDot(ctx, v) })
}

func (r *mutationResolver) PublishSystemNotification(ctx context.Context, title string, body string, idempotencyKey *string) (*model.SystemNotification, error) {
	n, err := r.Store.PublishNotification(ctx, title, body, deref(idempotencyKey))
	if err != nil {
		return nil, err
	}
	return &model.SystemNotification{N: n}, nil
}

func (r *mutationResolver) PushRedDot(ctx context.Context) (bool, error) {
	return true, r.Store.PushRedDot(ctx)
}

func (r *mutationResolver) EraseUser(ctx context.Context, userID string) (bool, error) {
	user, err := parseID[engine.UserID]("userId", userID)
	if err != nil {
		return false, err
	}
	return true, r.Store.EraseUser(ctx, user)
}

func (r *mutationResolver) CreateGroup(ctx context.Context, memberIds []string) (*model.Group, error) {
	users, err := parseIDs[engine.UserID]("member id", memberIds)
	if err != nil {
		return nil, err
	}
	id, err := r.Store.CreateGroup(ctx, viewerOf(ctx), users)
	if err != nil {
		return nil, err
	}
	return (*Resolver)(r).group(ctx, id)
}

func (r *mutationResolver) AddGroupMembers(ctx context.Context, groupID string, userIds []string) (*model.Group, error) {
	gid, err := parseID[engine.GroupID]("groupId", groupID)
	if err != nil {
		return nil, err
	}
	users, err := parseIDs[engine.UserID]("user id", userIds)
	if err != nil {
		return nil, err
	}
	if err := r.Store.AddGroupMembers(ctx, viewerOf(ctx), gid, users); err != nil {
		return nil, err
	}
	return (*Resolver)(r).group(ctx, gid)
}

// LeaveGroup returns the group as its remaining members see it once the
// viewer has left, as the engine read it in the same step as the leave.
// The pages of members the selection asks for are read first, while the
// viewer may still read them, without the viewer.
func (r *mutationResolver) LeaveGroup(ctx context.Context, groupID string) (*model.Group, error) {
	gid, err := parseID[engine.GroupID]("groupId", groupID)
	if err != nil {
		return nil, err
	}
	v := viewerOf(ctx)
	pages := map[model.PageKey][]engine.UserID{}
	for _, f := range graphql.CollectFieldsCtx(ctx, nil) {
		if f.Name != "members" {
			continue
		}
		args := f.ArgumentMap(graphql.GetOperationContext(ctx).Variables)
		var first *int
		if v, ok := args["first"].(int64); ok {
			n := int(v)
			first = &n
		}
		var after *string
		if a, ok := args["after"].(string); ok {
			after = &a
		}
		n, cursor, err := pageArgs(first, after)
		if err != nil {
			// Who may not read the group learns that first, as from any
			// read of it.
			if _, gerr := r.Store.Group(ctx, v, gid); gerr != nil {
				return nil, gerr
			}
			return nil, err
		}
		page, err := r.pageWithout(ctx, v, gid, n, cursor)
		if err != nil {
			return nil, err
		}
		pages[model.PageKey{First: n, After: cursor}] = page
	}
	after, err := r.Store.LeaveGroup(ctx, v, gid)
	if err != nil {
		return nil, err
	}
	return &model.Group{G: after, Pages: pages}, nil
}

// pageWithout reads one page of a group's members as it will be once
// viewer has left.
func (r *mutationResolver) pageWithout(ctx context.Context, viewer engine.UserID, g engine.GroupID, first int, after engine.UserID) ([]engine.UserID, error) {
	var out []engine.UserID
	for len(out) < first {
		page, err := r.Store.GroupMembers(ctx, viewer, g, first, after)
		if err != nil {
			return nil, err
		}
		for _, u := range page {
			if u != viewer && len(out) < first {
				out = append(out, u)
			}
		}
		if len(page) < first {
			break
		}
		after = page[len(page)-1]
	}
	return out, nil
}

func (r *mutationResolver) SendMessage(ctx context.Context, groupID string, text string, mentions []string, idempotencyKey *string) (*model.Message, error) {
	gid, err := parseID[engine.GroupID]("groupId", groupID)
	if err != nil {
		return nil, err
	}
	users, err := parseIDs[engine.UserID]("mention", mentions)
	if err != nil {
		return nil, err
	}
	m, err := r.Store.SendMessage(ctx, viewerOf(ctx), gid, text, users, deref(idempotencyKey))
	if err != nil {
		return nil, err
	}
	return &model.Message{M: m}, nil
}

func (r *mutationResolver) MarkMessagesRead(ctx context.Context, messageIds []string) ([]model.Message, error) {
	ids, err := parseIDs[engine.MessageID]("message id", messageIds)
	if err != nil {
		return nil, err
	}
	msgs, err := r.Store.MarkMessagesRead(ctx, viewerOf(ctx), ids)
	if err != nil {
		return nil, err
	}
	out := make([]model.Message, len(msgs))
	for i, m := range msgs {
		out[i] = model.Message{M: m}
	}
	return out, nil
}
