package embedded

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
	"github.com/tally-dev/tally/engine/ops"
	"github.com/tally-dev/tally/engine/tier"
	"github.com/tally-dev/tally/engine/wal"
)

// sampleRecords returns records of every kind (both directions of like,
// favorite and follow), with ids of every size and the optional parts
// present and absent.
func sampleRecords() []record {
	now := time.Date(2026, 11, 23, 10, 0, 0, 0, time.UTC).UnixNano()
	big := uint64(1)<<63 + 12345
	h := func(t int64) recHeader { return recHeader{time: t} }
	idem := recHeader{time: now, idem: idemKey{1, big}, fp: 42}
	return []record{
		&createPostRec{h(0), ops.CreatePost{Viewer: 1, Post: 1}},
		&createPostRec{idem, ops.CreatePost{Viewer: engine.UserID(big), Post: engine.PostID(big)}},
		&createPostRec{h(now), ops.CreatePost{Viewer: 3, Post: 1 << 50}},
		&reactRec{h(now), ops.ReactToPost{Viewer: 5, Post: 1 << 60, Kind: counters.Like}},
		&reactRec{h(now), ops.ReactToPost{Viewer: 5, Post: 7, Kind: counters.MaxKinds}},
		&unreactRec{h(now), ops.UnreactToPost{Viewer: 5, Post: 7, Only: counters.Like}},
		&unreactRec{h(now), ops.UnreactToPost{Viewer: 5, Post: 7}},
		&kindsRec{h(now), threeKinds()},
		&favoriteRec{h(1), ops.Favorite{Viewer: 5, Post: 7}},
		&favoriteRec{h(2), ops.Favorite{Viewer: 5, Post: 7, Undo: true}},
		&commentRec{h(now), ops.Comment{Viewer: 2, Post: 9}},
		&commentRec{idem, ops.Comment{Viewer: 2, Post: 9, Mentions: []engine.UserID{3, engine.UserID(big)}}},
		&repostRec{idem, ops.Repost{Viewer: 2, Post: 9, NewPost: 1 << 55, Mentions: []engine.UserID{4}}},
		&repostRec{h(now), ops.Repost{Viewer: 2, Post: 9, NewPost: 10}},
		&viewsRec{h(now), ops.RecordViews{Posts: []engine.PostID{1, 1, engine.PostID(big)}}},
		&followRec{h(now), ops.Follow{Viewer: 1, Target: 2}},
		&followRec{h(now), ops.Follow{Viewer: 1, Target: 2, Undo: true}},
		&touchRec{recHeader: h(now), viewer: 8},
		&touchRec{recHeader: h(now), viewer: 8, reset: true},
		&touchRec{recHeader: h(now), viewer: 8, cursor: big, reset: true},
		&markReadRec{h(now), ops.MarkRead{Viewer: 8, Kind: engine.Mentions}},
		&markReadRec{h(now), ops.MarkRead{Viewer: 8, Kind: engine.Feed}},
		&clickRec{h(now), ops.ClickRedDot{Viewer: 9}},
		&pushRec{recHeader: h(now)},
		&publishRec{recHeader: h(now), Publish: ops.Publish{Title: "t"}, id: 1},
		&publishRec{recHeader: idem, Publish: ops.Publish{Title: "héllo", Body: strings.Repeat("b", 5000)}, id: big},
		&createGroupRec{h(now), ops.CreateGroup{Viewer: 1, Group: 5}},
		&createGroupRec{h(now), ops.CreateGroup{Viewer: 1, Group: 5, Members: []engine.UserID{2, 3}}},
		&addMembersRec{h(now), ops.AddMembers{Viewer: 1, Group: 5, Users: []engine.UserID{4}}},
		&leaveGroupRec{recHeader: h(now), LeaveGroup: ops.LeaveGroup{Viewer: 1, Group: 5}},
		&sendMessageRec{idem, ops.SendMessage{Viewer: 1, Group: 5, Message: 6, Text: "hi", Mentions: []engine.UserID{2}}},
		&sendMessageRec{h(now), ops.SendMessage{Viewer: 1, Group: 5, Message: 6, Text: "hi"}},
		&markMessagesReadRec{h(now), ops.MarkMessagesRead{Viewer: 1, Messages: []engine.MessageID{6, 6, 7}}},
		&sweepRec{recHeader: h(now), ttl: int64(engine.DefaultCursorTTL)},
		&importRec{recHeader: h(now), rows: []engine.ImportRow{{Post: 1, Counts: engine.Counts{Views: 1}},
			{Post: engine.PostID(big), Author: 3, Counts: engine.Counts{Likes: 1 << 62, Comments: 2, Reposts: 3, Favorites: 5},
				Reactions: counters.Reactions{0: 7, 3: 1 << 62, counters.MaxKinds - 2: 1}}}},
		&commentRec{idem, ops.Comment{Viewer: 2, Post: 9, Comment: engine.CommentID(big), Mentions: []engine.UserID{3}}},
		&deleteCommentRec{h(now), ops.DeleteComment{Actor: engine.Actor{User: 2}, Post: 9, Comment: 11}},
		&deleteCommentRec{h(now), ops.DeleteComment{Actor: engine.Actor{User: engine.UserID(big), Privileged: true}, Post: 9, Comment: engine.CommentID(big)}},
		&deletePostRec{h(now), ops.DeletePost{Actor: engine.Actor{User: 2}, Post: engine.PostID(big)}},
		&deletePostRec{h(now), ops.DeletePost{Actor: engine.Actor{User: 2, Privileged: true}, Post: 9}},
		&eraseRec{h(now), ops.EraseUser{User: engine.UserID(big)}},
		&eraseStepRec{recHeader: h(now), user: 4, phase: phaseLikes, keys: []uint64{1, big}, next: tier.Cursor{Post: big, User: 3}},
		&eraseStepRec{recHeader: h(now), user: 4, phase: phaseIdem, phaseEnd: true},
		&recountRec{recHeader: h(now), check: 1, id: big, from: 3, to: 0},
		&recountRec{recHeader: h(now), check: 4, id: 7, from: 0, to: 1 << 40},
	}
}

// show renders a record with its contents, for comparisons.
func show(r record) string { return fmt.Sprintf("%T %+v", r, r) }

// TestRecordRoundTrip: every kind decodes to itself; every strict prefix
// and any trailing byte is rejected.
func TestRecordRoundTrip(t *testing.T) {
	kinds := map[opKind]bool{}
	for _, r := range sampleRecords() {
		_, kind, _, _ := recordInfo(r)
		kinds[kind] = true
		rec := appendRecord(nil, r)
		got, err := decodeRecord(rec)
		if err != nil {
			t.Fatalf("%s: %v", show(r), err)
		}
		if show(got) != show(r) {
			t.Fatalf("round trip of\n%s gave\n%s", show(r), show(got))
		}
		for i := range len(rec) {
			if _, err := decodeRecord(rec[:i]); err == nil {
				t.Fatalf("%s: prefix of %d bytes decoded", show(r), i)
			}
		}
		if _, err := decodeRecord(append(bytes.Clone(rec), 0)); err == nil {
			t.Fatalf("%s: trailing byte accepted", show(r))
		}
	}
	for k := opCreatePost; k < opKindEnd; k++ {
		if !kinds[k] {
			t.Errorf("no sample of %v", k)
		}
	}
	// A like of today's ids takes about 25 bytes.
	like := &reactRec{recHeader{time: time.Now().UnixNano()}, ops.ReactToPost{Viewer: 1 << 20, Post: 1 << 62, Kind: counters.Like}}
	if n := len(appendRecord(nil, like)); n > 25 {
		t.Fatalf("a like record takes %d bytes", n)
	}
}

// TestRecordRejects: records no engine writes are refused, and records
// of another version are a format error, not damage.
func TestRecordRejects(t *testing.T) {
	rec := func(b ...byte) []byte { return append([]byte{recordVersion}, b...) }
	keyed := func(key, fp byte) []byte {
		b := rec(byte(opCreatePost), 1, 5, 5, 1)
		b = append(b, key, 0, 0, 0, 0, 0, 0, 0, key, 0, 0, 0, 0, 0, 0, 0)
		return append(b, fp, 0, 0, 0, 0, 0, 0, 0)
	}
	if _, err := decodeRecord(keyed(1, 1)); err != nil {
		t.Fatalf("a keyed record: %v", err)
	}
	for name, r := range map[string][]byte{
		"empty":               {},
		"kind 0":              rec(0, 1),
		"unknown kind":        rec(byte(opKindEnd), 1),
		"like of post 0":      rec(byte(opReact), 1, 5, 0, 1),
		"like by user 0":      rec(byte(opReact), 1, 0, 5, 1),
		"overlong viewer":     rec(byte(opReact), 1, 0x85, 0, 5, 1),
		"reaction of kind 0":  rec(byte(opReact), 1, 5, 5, 0),
		"reaction of kind 17": rec(byte(opReact), 1, 5, 5, 17),
		"reaction, no kind":   rec(byte(opReact), 1, 5, 5),
		"unreact only 17":     rec(byte(opUnreact), 1, 5, 5, 17),
		"kinds without like":  rec(byte(opKinds), 1, 1, 2, 4, 'l', 'o', 'v', 'e'),
		"kinds out of order":  rec(byte(opKinds), 1, 2, 2, 4, 'l', 'o', 'v', 'e', 1, 4, 'l', 'i', 'k', 'e'),
		"kind id past 16":     rec(byte(opKinds), 1, 2, 1, 4, 'l', 'i', 'k', 'e', 17, 1, 'x'),
		"a kind name twice":   rec(byte(opKinds), 1, 2, 1, 4, 'l', 'i', 'k', 'e', 2, 4, 'l', 'i', 'k', 'e'),
		"touch flag 2":        rec(byte(opTouch), 1, 5, 2),
		"mark read kind 7":    rec(byte(opMarkRead), 1, 5, 7),
		"views of none":       rec(byte(opViews), 1, 0),
		"view of post 0":      rec(byte(opViews), 1, 1, 0),
		"list past the end":   rec(byte(opViews), 1, 100, 1),
		"idem flag 2":         rec(byte(opCreatePost), 1, 5, 5, 2),
		"zero idem key":       keyed(0, 1),
		"zero fingerprint":    keyed(1, 0),
		"key cut short":       rec(byte(opCreatePost), 1, 5, 5, 1, 7, 0, 0, 0, 0, 0, 0, 0),
		"empty title":         rec(byte(opPublish), 1, 5, 0, 0, 0),
		"import of none":      rec(byte(opImport), 1, 0),
		"import kind 1 bit":   rec(byte(opImport), 1, 1, 5, 0, 0, 0, 0, 0, 0, 1<<1, 3),
		"import kind 17 bit":  rec(byte(opImport), 1, 1, 5, 0, 0, 0, 0, 0, 0, 0x80, 0x80, 0x08, 3),
		"import zero of kind": rec(byte(opImport), 1, 1, 5, 0, 0, 0, 0, 0, 0, 1<<2, 0),
		"import kind cut":     rec(byte(opImport), 1, 1, 5, 0, 0, 0, 0, 0, 0, 1<<2),
		"unknown check":       rec(byte(opRecount), 1, 99, 5, 1, 2),
		"recount of id 0":     rec(byte(opRecount), 1, 1, 0, 1, 2),
		"recount to itself":   rec(byte(opRecount), 1, 1, 5, 2, 2),
	} {
		if got, err := decodeRecord(r); err == nil || !errors.Is(err, errBadRecord) {
			t.Errorf("%s: decoded %v, %v", name, got, err)
		}
	}
	for _, v := range []byte{0, 1, recordVersion - 1, recordVersion + 1, 0xff} {
		_, err := decodeRecord([]byte{v, byte(opReact), 1, 1, 1})
		var fe *engine.FormatError
		if !errors.As(err, &fe) || fe.Found != uint64(v) || fe.Want != recordVersion || errors.Is(err, errBadRecord) {
			t.Errorf("version %d: %v, want a format error", v, err)
		}
	}
}

// FuzzRecord feeds arbitrary bytes to the record decoder: it must never
// panic, and whatever it accepts is canonical (re-encodes to the same
// bytes). The seeds are every kind.
func FuzzRecord(f *testing.F) {
	for _, r := range sampleRecords() {
		f.Add(appendRecord(nil, r))
	}
	f.Add([]byte{})
	f.Add([]byte{recordVersion, byte(opViews), 1, 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, rec []byte) {
		r, err := decodeRecord(rec)
		if err != nil {
			return
		}
		if re := appendRecord(nil, r); !bytes.Equal(re, rec) {
			t.Fatalf("decoded %x re-encodes as %x", rec, re)
		}
	})
}

// TestRecordReaderReuse: a reader decoding record after record (replay)
// gives what fresh decodes give, lists shorter than the last included.
func TestRecordReaderReuse(t *testing.T) {
	var rd recordReader
	samples := sampleRecords()
	for range 2 {
		for i := len(samples) - 1; i >= 0; i-- {
			rec := appendRecord(nil, samples[i])
			got, err := rd.decode(rec)
			if err != nil || show(got) != show(samples[i]) {
				t.Fatalf("reused reader: %s, %v; want %s", show(got), err, show(samples[i]))
			}
		}
	}
}

func TestOpenRejectsGarbageRecord(t *testing.T) {
	dir := t.TempDir()
	l, err := wal.Open(dir, wal.Options{Sync: wal.SyncNone})
	ok(t, err)
	good := appendRecord(nil, &createPostRec{recHeader{time: 1}, ops.CreatePost{Viewer: 1, Post: 1 << 30}})
	for _, rec := range [][]byte{good, {recordVersion, 200, 0, 1}} {
		_, err = l.Append(rec)
		ok(t, err)
	}
	ok(t, l.Close())
	_, err = Open(Options{Dir: dir, Logger: quiet})
	if err == nil || !errors.Is(err, errBadRecord) || !strings.Contains(err.Error(), "record 2") {
		t.Fatalf("Open over a bad record: %v", err)
	}
}

// threeKinds is a kinds table with ids that are not their display order.
func threeKinds() counters.Kinds {
	k := counters.NewKinds()
	k.Put(2, "love")
	k.Put(5, "sad")
	return k
}
