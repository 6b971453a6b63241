// Package model holds the Go types gqlgen binds the schema's object types
// to. They carry engine ids; everything else is resolved (and batched) by
// the resolvers and loaders.
package model

import (
	"strconv"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/snowflake"
)

// Post is a post known to Tally, with what the query selected of it read
// for the whole page at once.
type Post struct {
	PostID             engine.PostID
	AuthorID           engine.UserID // 0 for a post imported without its author
	CountValues        engine.Counts
	ViewerHasLiked     bool
	ViewerHasFavorited bool
	// Kinds are the deployment's reaction kinds (Store.ReactionKinds),
	// ReactionValues their counts in that order (nil when not read: the
	// page's own read, not a copy); ViewerKind is the viewer's reaction
	// ("" none).
	Kinds          []string
	ReactionValues *engine.Reactions
	ViewerKind     string
}

// ReactionCount is one reaction kind's count on a post.
type ReactionCount struct {
	Kind  string
	Count int64
}

// Reactions are the post's count of every kind, in display order.
func (p *Post) Reactions() []ReactionCount {
	if p.ReactionValues == nil {
		return nil
	}
	out := make([]ReactionCount, len(p.Kinds))
	for i, k := range p.Kinds {
		out[i] = ReactionCount{Kind: k, Count: p.ReactionValues.Count[i]}
	}
	return out
}

// ViewerReaction is the viewer's reaction kind, nil for none.
func (p *Post) ViewerReaction() *string {
	if p.ViewerKind == "" {
		return nil
	}
	return &p.ViewerKind
}

func (p *Post) ID() string { return FormatID(p.PostID) }

// Counts are the post's counts with the post's id as their identity.
func (p *Post) Counts() PostCounts { return PostCounts{PostID: p.PostID, Counts: p.CountValues} }

// PostCounts are one post's counts. The post's id is their identity, so a
// normalising client cache merges a mutation's counts into the cached feed.
type PostCounts struct {
	PostID engine.PostID
	engine.Counts
}

func (c PostCounts) ID() string { return FormatID(c.PostID) }

// Author is nil only for a post imported without its author.
func (p *Post) Author() *User {
	if p.AuthorID == 0 {
		return nil
	}
	return &User{UserID: p.AuthorID}
}

// CreatedAt decodes the time from the snowflake id.
func (p *Post) CreatedAt() time.Time { return snowflake.Time(uint64(p.PostID)) }

// User is any user id; its counters are resolved through a loader.
type User struct{ UserID engine.UserID }

func (u *User) ID() string { return FormatID(u.UserID) }

// Viewer is the signed-in user. Unread, when set, is the badge state
// already read for this response (a subscription event compares it with
// the last one it sent before pushing), so it is not read again.
type Viewer struct {
	UserID engine.UserID
	Unread *engine.Unread
}

func (v *Viewer) ID() string { return FormatID(v.UserID) }

// SystemNotification wraps an engine notification.
type SystemNotification struct{ N engine.Notification }

func (n *SystemNotification) ID() string           { return FormatID(n.N.ID) }
func (n *SystemNotification) Title() string        { return n.N.Title }
func (n *SystemNotification) Body() string         { return n.N.Body }
func (n *SystemNotification) CreatedAt() time.Time { return n.N.CreatedAt }

// Group wraps an engine group: its count and first page of members.
type Group struct {
	G engine.Group
	// Pages, when set, are the member pages read ahead (leaveGroup reads
	// them before the viewer leaves); a page not in it is not served.
	Pages map[PageKey][]engine.UserID
}

// PageKey names one page of members: its size and cursor.
type PageKey struct {
	First int
	After engine.UserID
}

func (g *Group) ID() string       { return FormatID(g.G.ID) }
func (g *Group) MemberCount() int { return g.G.MemberCount }

// Page returns the page (first, after) if the group already holds it:
// a read-ahead page, or the first page when Group's read covers it.
func (g *Group) Page(first int, after engine.UserID) ([]engine.UserID, bool) {
	if g.Pages != nil {
		// Read ahead for every members field of the selection; no other
		// page may be read once the viewer has left.
		return g.Pages[PageKey{first, after}], true
	}
	if after == 0 && (first <= len(g.G.Members) || len(g.G.Members) == g.G.MemberCount) {
		return g.G.Members[:min(first, len(g.G.Members))], true
	}
	return nil, false
}

// Message wraps an engine message.
type Message struct{ M engine.Message }

func (m *Message) ID() string        { return FormatID(m.M.ID) }
func (m *Message) Text() string      { return m.M.Text }
func (m *Message) SentAt() time.Time { return m.M.SentAt }

// ReadReceipts is one message's receipts as read for its sender.
type ReadReceipts struct {
	Message engine.MessageID
	Viewer  engine.UserID
	R       engine.Receipts
}

func (r *ReadReceipts) ReadCount() int   { return r.R.ReadCount }
func (r *ReadReceipts) UnreadCount() int { return r.R.UnreadCount }

// FormatID renders an id as the decimal string GraphQL clients see.
func FormatID[T ~uint64](id T) string { return strconv.FormatUint(uint64(id), 10) }
