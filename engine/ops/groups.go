package ops

import (
	"fmt"

	"github.com/tally-dev/tally/engine"
)

// Membership names a user of a group. Each user gets a small mapid on
// first join (1, 2, 3, ...), kept forever: leaving marks them quit and a
// returning member gets their old mapid back (docs/seeds.md#seed-004).
type Membership struct {
	Group engine.GroupID
	User  engine.UserID
}

// ReceiptRead marks Message read by User.
type ReceiptRead struct {
	Message engine.MessageID
	User    engine.UserID
}

// MemberState is one user's standing in a group.
type MemberState struct {
	Joined  bool // has a mapid (joined once, may have left)
	Current bool // joined and not quit
}

// GroupFacts are what a group operation reads of the group and of the
// viewer in it.
type GroupFacts struct {
	Exists bool
	Viewer MemberState
	// MapIDs is how many mapids the group has given out (members past and
	// present); only AddMembers reads it.
	MapIDs int
}

// ErrNotMember is the answer to a group operation by someone who is not a
// current member.
var ErrNotMember = fmt.Errorf("%w: not a member of the group", engine.ErrForbidden)

func errGroupNotFound(id engine.GroupID) error {
	return fmt.Errorf("%w: group %d", engine.ErrNotFound, uint64(id))
}

// viewerIn judges the facts every group operation by a member shares.
func viewerIn(id engine.GroupID, f GroupFacts) error {
	switch {
	case !f.Exists:
		return errGroupNotFound(id)
	case !f.Viewer.Current:
		return ErrNotMember
	}
	return nil
}

// CreateGroup makes Group (its id filled in by the backend) with Viewer
// and Members.
type CreateGroup struct {
	Viewer  engine.UserID
	Group   engine.GroupID
	Members []engine.UserID
}

// Check validates the member list (engine.NormalizeUsers) and drops the
// creator from it: the creator joins first, with mapid 1.
func (op *CreateGroup) Check() error {
	if err := engine.CheckViewer(op.Viewer); err != nil {
		return err
	}
	m, err := engine.NormalizeUsers(op.Members)
	if err != nil {
		return err
	}
	op.Members = dropUser(m, op.Viewer)
	return nil
}

// Decide: the creator joins, then each member in the order given.
func (op *CreateGroup) Decide(eff *Effects) {
	eff.Joins = append(eff.Joins, Membership{Group: op.Group, User: op.Viewer})
	for _, u := range op.Members {
		eff.Joins = append(eff.Joins, Membership{Group: op.Group, User: u})
	}
}

func dropUser(users []engine.UserID, drop engine.UserID) []engine.UserID {
	out := users[:0]
	for _, u := range users {
		if u != drop {
			out = append(out, u)
		}
	}
	return out
}

// AddMembers adds Users to Group, by Viewer, a current member.
type AddMembers struct {
	Viewer engine.UserID
	Group  engine.GroupID
	Users  []engine.UserID
}

// Check validates the user list.
func (op *AddMembers) Check() error {
	if err := engine.CheckViewer(op.Viewer); err != nil {
		return err
	}
	u, err := engine.NormalizeUsers(op.Users)
	if err != nil {
		return err
	}
	op.Users = u
	return nil
}

// Decide: only a current member adds; users already current are left
// alone; the group holds at most engine.MaxGroupMembers mapids, counting
// those who left (they keep theirs).
func (op *AddMembers) Decide(f GroupFacts, member func(engine.UserID) MemberState, eff *Effects) error {
	if err := viewerIn(op.Group, f); err != nil {
		return err
	}
	first := len(eff.Joins)
	fresh := 0
	for _, u := range op.Users {
		st := member(u)
		if st.Current {
			continue
		}
		if !st.Joined {
			fresh++
		}
		eff.Joins = append(eff.Joins, Membership{Group: op.Group, User: u})
	}
	if f.MapIDs+fresh > engine.MaxGroupMembers {
		eff.Joins = eff.Joins[:first]
		return fmt.Errorf("%w: a group holds at most %d members", engine.ErrInvalid, engine.MaxGroupMembers)
	}
	return nil
}

// LeaveGroup is Viewer leaving Group.
type LeaveGroup struct {
	Viewer engine.UserID
	Group  engine.GroupID
}

// Check validates the call.
func (op *LeaveGroup) Check() error { return engine.CheckViewer(op.Viewer) }

// Decide: only a current member can leave: someone who never joined, or
// who left already, is ErrNotMember, as for every call that needs
// membership (the answer is the group as its members see it, which a
// non-member may not), so leaving again changes nothing. A member who
// leaves is marked quit and keeps their mapid.
func (op *LeaveGroup) Decide(f GroupFacts, eff *Effects) error {
	if err := viewerIn(op.Group, f); err != nil {
		return err
	}
	eff.Leaves = append(eff.Leaves, Membership{Group: op.Group, User: op.Viewer})
	return nil
}

// SendMessage is a message by Viewer to Group. Message is its id, filled
// in by the backend before Decide.
type SendMessage struct {
	Viewer   engine.UserID
	Group    engine.GroupID
	Message  engine.MessageID
	Text     string
	Mentions []engine.UserID
	IdemKey  string
}

// Check validates the text and normalises the mentions.
func (op *SendMessage) Check() error {
	if err := engine.CheckViewer(op.Viewer); err != nil {
		return err
	}
	if err := engine.CheckText(op.Text); err != nil {
		return err
	}
	return checkMentioning(op.Viewer, &op.Mentions, op.IdemKey)
}

// Decide: only a current member sends. Every other current member's
// unread messages +1; each mentioned current member's unread mentions +1
// (a mention of someone outside the group is ignored).
func (op *SendMessage) Decide(f GroupFacts, current func(engine.UserID) bool, eff *Effects) error {
	if err := viewerIn(op.Group, f); err != nil {
		return err
	}
	eff.Fanouts = append(eff.Fanouts, Fanout{Group: op.Group, Except: op.Viewer, Kind: engine.Messages})
	for _, u := range op.Mentions {
		if current(u) {
			eff.bump(u, engine.Mentions)
		}
	}
	return nil
}

// Counted is the read-receipt rule for one member and one message: a
// member counts (as a reader or an unreader) when they had joined by the
// time it was sent (mapid ≤ maxid), had not left then, and are not its
// sender.
func Counted(mapid, maxid uint32, quitAtSend, sender bool) bool {
	return mapid != 0 && mapid <= maxid && !quitAtSend && !sender
}

// MessageFacts are what marking one message read knows of it.
type MessageFacts struct {
	Exists bool
	Sender engine.UserID
	// Viewer is the marking user's standing in the message's group now.
	Viewer MemberState
	// Counted: the viewer counts for this message (Counted); Read: and
	// has read it already.
	Counted, Read bool
}

// MarkMessagesRead is Viewer reading Messages.
type MarkMessagesRead struct {
	Viewer   engine.UserID
	Messages []engine.MessageID
}

// Check validates the ids.
func (op *MarkMessagesRead) Check() error {
	if err := engine.CheckViewer(op.Viewer); err != nil {
		return err
	}
	return engine.CheckIDs(op.Messages)
}

// Decide, with facts[i] about Messages[i]: an unknown id anywhere is
// NOT_FOUND and a message of a group the viewer is not a current member
// of is FORBIDDEN, both before anything changes; a read counts only for
// a member the message counts (Counted), once; its sender is told.
func (op *MarkMessagesRead) Decide(facts []MessageFacts, eff *Effects) error {
	for i, f := range facts {
		if !f.Exists {
			return fmt.Errorf("%w: message %d", engine.ErrNotFound, uint64(op.Messages[i]))
		}
	}
	for _, f := range facts {
		if !f.Viewer.Current {
			return ErrNotMember
		}
	}
	for i, f := range facts {
		if !f.Counted || f.Read || seenBefore(op.Messages, i) {
			continue
		}
		eff.Receipts = append(eff.Receipts, ReceiptRead{Message: op.Messages[i], User: op.Viewer})
		if eff.Quiet {
			eff.quieted++
			continue
		}
		eff.Events = append(eff.Events, engine.Event{Kind: engine.ReceiptsChanged,
			Message: op.Messages[i], Users: []engine.UserID{f.Sender}})
	}
	return nil
}

// seenBefore reports whether ids[i] appears earlier in ids.
func seenBefore(ids []engine.MessageID, i int) bool {
	for _, id := range ids[:i] {
		if id == ids[i] {
			return true
		}
	}
	return false
}
