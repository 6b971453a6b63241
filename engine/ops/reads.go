package ops

import (
	"fmt"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

// Reads that depend on stored state are product rules too: who may see a
// group, a message, its receipts. Each is judged here from the facts the
// backend read, before it reads anything else.

// ViewGroup: a group and its member list are for its current members.
func ViewGroup(id engine.GroupID, f GroupFacts) error { return viewerIn(id, f) }

// ViewMessage: a message is for the current members of its group.
// exists says the message is known; viewer is the reader's standing in
// the message's group.
func ViewMessage(id engine.MessageID, exists bool, viewer MemberState) error {
	switch {
	case !exists:
		return errMessageNotFound(id)
	case !viewer.Current:
		return ErrNotMember
	}
	return nil
}

// ErrNotSender answers a receipts read by anyone but the message's sender.
var ErrNotSender = fmt.Errorf("%w: only the sender sees read receipts", engine.ErrForbidden)

// ErrSenderLeft answers a receipts read by a sender who left the group.
var ErrSenderLeft = fmt.Errorf("%w: only the sender sees read receipts, while a member of the group", engine.ErrForbidden)

// ViewReceipts: a message's read receipts are for its sender, while the
// sender is a current member of the group.
func ViewReceipts(id engine.MessageID, exists, isSender bool, viewer MemberState) error {
	switch {
	case !exists:
		return errMessageNotFound(id)
	case !isSender:
		return ErrNotSender
	case !viewer.Current:
		return ErrSenderLeft
	}
	return nil
}

func errMessageNotFound(id engine.MessageID) error {
	return fmt.Errorf("%w: message %d", engine.ErrNotFound, uint64(id))
}

// CheckImport validates the rows of one import call (engine.Importer)
// against the store's kinds table: no post id 0, no negative count, no
// count of a reaction kind the table does not have (it would be stored
// under an id that names nothing). Row numbers in errors count from 1.
func CheckImport(rows []ImportRow, kinds *counters.Kinds) error {
	for i, r := range rows {
		c := r.Counts
		if r.Post == 0 {
			return fmt.Errorf("%w: post id 0 in import row %d", engine.ErrInvalid, i+1)
		}
		if min(c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites) < 0 {
			return fmt.Errorf("%w: post %d has a negative count", engine.ErrInvalid, uint64(r.Post))
		}
		for j, v := range r.Reactions {
			k := counters.Kind(j + 2)
			switch {
			case v < 0:
				return fmt.Errorf("%w: post %d has a negative count of reaction kind %q", engine.ErrInvalid, uint64(r.Post), kinds.Name(k))
			case v > 0 && !kinds.Has(k):
				return fmt.Errorf("%w: post %d has a count of reaction kind id %d, which the store has no kind for", engine.ErrInvalid, uint64(r.Post), k)
			}
		}
	}
	return nil
}
