package enginetest

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest/refmodel"
	"github.com/tally-dev/tally/engine/snowflake"
)

// The metamorphic test runs one long random workload against the
// reference model (engine/enginetest/refmodel) and a backend, op by op,
// and compares every answer: values, and errors by class (errors.Is with
// ErrInvalid, ErrNotFound, ErrForbidden, ErrUnavailable). The workload is
// generated from a seed and the model's state, so a seed replays exactly.
// Events (Subscribe) and Stats are not compared.
//
// Environment:
//
//	TALLY_MODEL_SEED=n      replay seed n (printed by every run)
//	TALLY_MODEL_TIME=60s    run each backend this long (default 2s)
//	TALLY_MODEL_OPS=n       stop after n ops (default: by time only)

// MetamorphicBudget returns the seed, the time budget and the op limit of
// this run, from the environment or defaults.
func metamorphicBudget(t *testing.T) (seed uint64, budget time.Duration, maxOps int) {
	seed = uint64(time.Now().UnixNano())
	if v := os.Getenv("TALLY_MODEL_SEED"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("TALLY_MODEL_SEED=%q: %v", v, err)
		}
		seed = n
	}
	budget = 2 * time.Second
	if v := os.Getenv("TALLY_MODEL_TIME"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("TALLY_MODEL_TIME=%q: %v", v, err)
		}
		budget = d
	}
	maxOps = 1 << 62
	if v := os.Getenv("TALLY_MODEL_OPS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("TALLY_MODEL_OPS=%q: %v", v, err)
		}
		maxOps = n
	}
	return seed, budget, maxOps
}

// RunMetamorphic runs the metamorphic test on b. On a difference it
// reports the op, both answers and the ops before it, then shrinks the
// run to a short sequence of ops that still shows a difference (for at
// most TALLY_MODEL_SHRINK, default 60s; 0 turns shrinking off).
func RunMetamorphic(t *testing.T, b Backend) {
	seed, budget, maxOps := metamorphicBudget(t)
	t.Logf("metamorphic %s: seed %d (replay: TALLY_MODEL_SEED=%d)", b.Name, seed, seed)
	clk := NewClock()
	kinds := ScriptKinds
	store, restart := b.Open(t, Config{Now: clk.Now, CursorTTL: metamorphicTTL, Reactions: kinds})
	w := &workload{
		rng:     rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		clk:     clk,
		backend: b,
		kinds:   kinds,
		model:   newSide(refmodel.New(clk.Now, metamorphicTTL, kinds)),
		store:   newSide(store),
	}
	deadline := time.Now().Add(budget)
	restarts := 0
	n := 0
	for ; n < maxOps && time.Now().Before(deadline); n++ {
		if restart != nil && w.rng.IntN(150) == 0 {
			s, err := restart()
			if err != nil {
				t.Fatalf("seed %d op %d: restart: %v", seed, n, err)
			}
			w.store.s = s
			w.record(recorded{n: n, restart: true})
			w.note("-- restart")
			restarts++
		}
		w.advance()
		r := recorded{n: n, at: w.clk.Now(), o: w.gen()}
		w.record(r)
		want, got := runOn(r, w.model, w.store)
		w.note(fmt.Sprintf("%6d %s @%s -> %s", n, r.o.desc, r.at.Format("2006-01-02T15:04:05.000"), want))
		if got != want {
			t.Errorf("seed %d op %d: %s\n backend %s: %s\n model: %s\nlast ops (model answers):\n%s\nreplay: TALLY_MODEL_SEED=%d TALLY_MODEL_OPS=%d",
				seed, n, r.o.desc, b.Name, got, want, strings.Join(w.tail, "\n"), seed, n+1)
			w.shrink(t)
			t.FailNow()
		}
	}
	CheckClean(t, w.store.s)
	t.Logf("metamorphic %s: %d ops, %d restarts, %d posts, %d groups, %d messages, %d notifications",
		b.Name, n, restarts, len(w.model.list[kPost]), len(w.model.list[kGroup]), len(w.model.list[kMsg]), len(w.model.list[kNotif]))
}

// metamorphicTTL is the cursor TTL of the metamorphic runs: short, so
// that the clock's jumps cross it often.
const metamorphicTTL = 10 * 24 * time.Hour

// recorded is one step of a run, kept for shrinking.
type recorded struct {
	n       int
	at      time.Time
	restart bool
	o       op
}

// maxRecorded bounds the steps kept for shrinking (a fast backend runs
// millions); a run that fails later is reported without shrinking.
const maxRecorded = 200_000

func (w *workload) record(r recorded) {
	if len(w.ops) < maxRecorded {
		w.ops = append(w.ops, r)
	} else {
		w.truncated = true
	}
}

// note keeps the last 60 lines of the run's log.
func (w *workload) note(line string) {
	if len(w.tail) == 60 {
		w.tail = append(w.tail[:0], w.tail[1:]...)
	}
	w.tail = append(w.tail, line)
}

func runOn(r recorded, model, store *side) (want, got string) {
	model.op, model.made = r.n, 0
	store.op, store.made = r.n, 0
	return r.o.run(model), r.o.run(store)
}

// replay runs ops on a fresh model and a fresh store of the backend and
// reports whether any answer differs, with the log of the run.
func (w *workload) replay(t *testing.T, ops []recorded) (bool, []string) {
	clk := NewClock()
	store, restart := w.backend.Open(t, Config{Now: clk.Now, CursorTTL: metamorphicTTL, Reactions: w.kinds})
	model, st := newSide(refmodel.New(clk.Now, metamorphicTTL, w.kinds)), newSide(store)
	var log []string
	for _, r := range ops {
		if r.restart {
			if restart != nil {
				s, err := restart()
				if err != nil {
					t.Fatalf("replay: restart: %v", err)
				}
				st.s = s
				log = append(log, "-- restart")
			}
			continue
		}
		clk.Set(r.at)
		want, got := runOn(r, model, st)
		if got != want {
			return true, append(log, fmt.Sprintf("%6d %s @%s\n   model:   %s\n   backend: %s",
				r.n, r.o.desc, r.at.Format("2006-01-02T15:04:05.000"), want, got))
		}
		log = append(log, fmt.Sprintf("%6d %s @%s -> %s", r.n, r.o.desc, r.at.Format("2006-01-02T15:04:05.000"), want))
	}
	return false, log
}

func shrinkBudget(t *testing.T) time.Duration {
	v := os.Getenv("TALLY_MODEL_SHRINK")
	if v == "" {
		return time.Minute
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("TALLY_MODEL_SHRINK=%q: %v", v, err)
	}
	return d
}

// shrink looks for a short sequence of the run's ops that still shows a
// difference: it drops chunks of ops, halving the chunk size, while the
// difference stays (ops keep their numbers and names; an id whose maker
// was dropped reads as an id no store made).
func (w *workload) shrink(t *testing.T) {
	budget := shrinkBudget(t)
	if budget <= 0 || w.truncated {
		return
	}
	ops := w.ops
	if differs, _ := w.replay(t, ops); !differs {
		t.Logf("shrinking: a fresh replay shows no difference (the difference depends on more than the ops)")
		return
	}
	deadline := time.Now().Add(budget)
	for chunk := len(ops) / 2; chunk >= 1 && time.Now().Before(deadline); {
		removed := false
		for start := 0; start < len(ops) && time.Now().Before(deadline); {
			cand := append(slices.Clone(ops[:start]), ops[min(start+chunk, len(ops)):]...)
			if differs, _ := w.replay(t, cand); differs {
				ops, removed = cand, true
			} else {
				start += chunk
			}
		}
		if !removed || chunk > 1 {
			chunk /= 2
		}
	}
	_, log := w.replay(t, ops)
	t.Errorf("shrunk to %d ops that still differ (in %v at most):\n%s", len(ops), budget, strings.Join(log, "\n"))
}

// Handle kinds: ids a store made are compared by the order in which each
// side first returned them.
const (
	kPost = iota
	kGroup
	kMsg
	kNotif
	nKinds
)

var kindLetter = [nKinds]string{"p", "g", "m", "n"}

// compared is the part of engine.Store the metamorphic test compares
// (the reference model implements it; every backend does, as a Store).
type compared interface {
	CreatePost(ctx context.Context, viewer engine.UserID, id engine.PostID, idemKey string) (engine.PostID, error)
	Posts(ctx context.Context, ids []engine.PostID) ([]engine.PostInfo, error)
	Page(ctx context.Context, viewer engine.UserID, ids []engine.PostID, want engine.PageWant, out []engine.PostView) error
	Counts(ctx context.Context, ids []engine.PostID) ([]engine.Counts, error)
	Liked(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error)
	Favorited(ctx context.Context, viewer engine.UserID, ids []engine.PostID) ([]bool, error)
	Like(ctx context.Context, viewer engine.UserID, post engine.PostID) error
	Unlike(ctx context.Context, viewer engine.UserID, post engine.PostID) error
	Favorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error
	Unfavorite(ctx context.Context, viewer engine.UserID, post engine.PostID) error
	ReactionKinds() []string
	ReactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID, kind string) error
	UnreactToPost(ctx context.Context, viewer engine.UserID, post engine.PostID) error
	Comment(ctx context.Context, viewer engine.UserID, post engine.PostID, comment engine.CommentID, mentions []engine.UserID, idemKey string) error
	DeleteComment(ctx context.Context, actor engine.Actor, post engine.PostID, comment engine.CommentID) error
	DeletePost(ctx context.Context, actor engine.Actor, post engine.PostID) error
	EraseUser(ctx context.Context, user engine.UserID) error
	Repost(ctx context.Context, viewer engine.UserID, post engine.PostID, mentions []engine.UserID, idemKey string) (engine.PostID, error)
	RecordViews(ctx context.Context, ids []engine.PostID) error
	UserCounts(ctx context.Context, ids []engine.UserID) ([]engine.UserCounts, error)
	Follow(ctx context.Context, viewer, target engine.UserID) error
	Unfollow(ctx context.Context, viewer, target engine.UserID) error
	Followees(ctx context.Context, viewer engine.UserID) ([]engine.UserID, error)
	Unread(ctx context.Context, viewer engine.UserID) (engine.Unread, error)
	MarkRead(ctx context.Context, viewer engine.UserID, kind engine.UnreadKind) error
	ClickRedDot(ctx context.Context, viewer engine.UserID) error
	PushRedDot(ctx context.Context) error
	PublishNotification(ctx context.Context, title, body, idemKey string) (engine.Notification, error)
	Notifications(ctx context.Context, first int, after engine.NotificationID) ([]engine.Notification, error)
	CreateGroup(ctx context.Context, viewer engine.UserID, members []engine.UserID) (engine.GroupID, error)
	AddGroupMembers(ctx context.Context, viewer engine.UserID, group engine.GroupID, users []engine.UserID) error
	LeaveGroup(ctx context.Context, viewer engine.UserID, group engine.GroupID) (engine.Group, error)
	Group(ctx context.Context, viewer engine.UserID, group engine.GroupID) (engine.Group, error)
	SendMessage(ctx context.Context, viewer engine.UserID, group engine.GroupID, text string, mentions []engine.UserID, idemKey string) (engine.Message, error)
	Message(ctx context.Context, viewer engine.UserID, id engine.MessageID) (engine.Message, error)
	MarkMessagesRead(ctx context.Context, viewer engine.UserID, ids []engine.MessageID) ([]engine.Message, error)
	Receipts(ctx context.Context, viewer engine.UserID, id engine.MessageID, limit int) (engine.Receipts, error)
	GroupMembers(ctx context.Context, viewer engine.UserID, group engine.GroupID, first int, after engine.UserID) ([]engine.UserID, error)
	ReceiptMembers(ctx context.Context, viewer engine.UserID, id engine.MessageID, readers bool, first int, after engine.UserID) ([]engine.UserID, error)
}

var _ compared = (*refmodel.Model)(nil)

// side is the model or the backend with its own names for the ids it
// made: an id is named after the op that first returned it (p120: the
// post op 120 made), so both sides name the same things alike, and a
// shrunk replay keeps the names of what it still makes.
type side struct {
	s      compared
	ids    [nKinds]map[uint64]string
	byName map[string]uint64
	list   [nKinds][]string // names in the order made
	op     int              // the op running
	made   int              // ids it has named so far
}

func newSide(s compared) *side {
	sd := &side{s: s, byName: map[string]uint64{}}
	for k := range sd.ids {
		sd.ids[k] = map[uint64]string{}
	}
	return sd
}

// ref renders an id a store returned by its name, naming it when new.
func (sd *side) ref(kind int, id uint64) string {
	if id == 0 {
		return "0"
	}
	if n, ok := sd.ids[kind][id]; ok {
		return n
	}
	n := fmt.Sprintf("%s%d", kindLetter[kind], sd.op)
	if sd.made > 0 {
		n += fmt.Sprintf(".%d", sd.made)
	}
	sd.made++
	sd.ids[kind][id], sd.byName[n] = n, id
	sd.list[kind] = append(sd.list[kind], n)
	return n
}

// arg is an id argument: a name (translated per side) or a raw id that
// is the same on both sides (an id no store made, or bad input).
type arg struct {
	kind int
	name string
	raw  uint64
}

func (a arg) id(sd *side) uint64 {
	if a.name == "" {
		return a.raw
	}
	if id, ok := sd.byName[a.name]; ok {
		return id
	}
	// The op that made it was dropped by shrinking: an id no store made.
	h := fnv.New32a()
	h.Write([]byte(a.name))
	return snowflake.Make(ClockStart.UnixMilli(), 1003, uint64(h.Sum32()%4096))
}

func (a arg) String() string {
	if a.name == "" {
		return fmt.Sprintf("#%d", a.raw)
	}
	return a.name
}

func ids[T ~uint64](sd *side, as []arg) []T {
	out := make([]T, len(as))
	for i, a := range as {
		out[i] = T(a.id(sd))
	}
	return out
}

type workload struct {
	rng          *rand.Rand
	clk          *Clock
	backend      Backend
	kinds        []string // the reaction kinds both sides are configured with
	model, store *side
	tail         []string
	ops          []recorded
	truncated    bool
	unknownSeq   uint64
	// comments are the comment ids the workload has sent (raw: an app
	// makes them, so they are the same on both sides).
	comments   []uint64
	commentSeq uint64
}

// commentID returns a comment id: none, a new one, or one sent before.
func (w *workload) commentID() uint64 {
	switch r := w.rng.IntN(10); {
	case r < 3:
		return 0
	case r < 6 || len(w.comments) == 0:
		w.commentSeq++
		id := snowflake.Make(w.clk.Now().UnixMilli(), 999, w.commentSeq%4096)
		w.comments = append(w.comments, id)
		return id
	case r == 6:
		return 12345 // not a snowflake of a plausible time
	}
	return w.comments[len(w.comments)-1-min(len(w.comments)-1, int(w.rng.ExpFloat64()*3))]
}

var ctx = context.Background()

func errClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, engine.ErrInvalid):
		return "error invalid"
	case errors.Is(err, engine.ErrNotFound):
		return "error not found"
	case errors.Is(err, engine.ErrForbidden):
		return "error forbidden"
	case errors.Is(err, engine.ErrUnavailable):
		return "error unavailable: " + err.Error()
	}
	return "error other: " + err.Error()
}

// op is one call: desc names it with handles; run performs it on a side
// and renders the answer.
type op struct {
	desc string
	run  func(sd *side) string
}

// advance moves the clock at least 1 ms (so ids of different ops never
// share a millisecond), sometimes by hours or weeks to cross idempotency
// and cursor expiry.
func (w *workload) advance() {
	d := time.Duration(1+w.rng.IntN(2000)) * time.Millisecond
	if w.clk.Now().Sub(ClockStart) > 2*365*24*time.Hour {
		// A long run stops jumping well before snowflake time runs out
		// (2079 with Twitter's epoch).
		w.clk.Advance(d)
		return
	}
	switch r := w.rng.IntN(1000); {
	case r < 4:
		d += time.Duration(2+w.rng.IntN(14)) * 24 * time.Hour
	case r < 20:
		d += time.Duration(1+w.rng.IntN(30)) * time.Hour
	}
	w.clk.Advance(d)
}

const users = 7

func (w *workload) user() engine.UserID {
	if w.rng.IntN(60) == 0 {
		return 0
	}
	return engine.UserID(1 + w.rng.IntN(users))
}

func (w *workload) validUser() engine.UserID { return engine.UserID(1 + w.rng.IntN(users)) }

func (w *workload) users(max int) []engine.UserID {
	out := make([]engine.UserID, w.rng.IntN(max+1))
	for i := range out {
		out[i] = w.validUser()
	}
	return out
}

// crowd returns up to MaxIDsPerCall users from a wide range, so groups
// grow past one bitmap word, past one page and past the sizes where a
// backend switches its receipt representation.
func (w *workload) crowd() []engine.UserID {
	out := make([]engine.UserID, 1+w.rng.IntN(engine.MaxIDsPerCall))
	for i := range out {
		out[i] = engine.UserID(1 + w.rng.IntN(5000))
	}
	return out
}

// member returns a user likely to be in big groups too.
func (w *workload) member() engine.UserID {
	if w.rng.IntN(4) == 0 {
		return engine.UserID(1 + w.rng.IntN(5000))
	}
	return w.validUser()
}

// unknown makes an id no store made, at the current millisecond.
func (w *workload) unknown() uint64 {
	w.unknownSeq++
	return snowflake.Make(w.clk.Now().UnixMilli(), 1001, w.unknownSeq%4096)
}

// pick returns a handle of kind, or sometimes (always when there is none)
// an unknown id.
func (w *workload) pick(kind int) arg {
	names := w.model.list[kind]
	n := len(names)
	if n == 0 || w.rng.IntN(25) == 0 {
		return arg{kind: kind, raw: w.unknown()}
	}
	// Favour recent handles.
	h := n - 1 - min(n-1, int(w.rng.ExpFloat64()*4))
	if w.rng.IntN(3) == 0 {
		h = w.rng.IntN(n)
	}
	return arg{kind: kind, name: names[h]}
}

func (w *workload) picks(kind, max int) []arg {
	n := w.rng.IntN(max + 1)
	if w.rng.IntN(200) == 0 {
		n = engine.MaxIDsPerCall + 1 // refused whole
	}
	out := make([]arg, n)
	for i := range out {
		out[i] = w.pick(kind)
	}
	if w.rng.IntN(60) == 0 {
		out = append(out, arg{kind: kind}) // id 0: refused whole
	}
	return out
}

// key returns an idempotency key, often one used before.
func (w *workload) key() string {
	if w.rng.IntN(3) == 0 {
		return ""
	}
	return fmt.Sprintf("k%d", w.rng.IntN(12))
}

// page returns a page size (sometimes out of range) and a cursor: none,
// someone who joined group g (per the model), or anyone.
func (w *workload) page(g arg) (first int, after engine.UserID) {
	first = w.rng.IntN(6)
	switch r := w.rng.IntN(40); {
	case r == 0:
		first = -1
	case r == 1:
		first = engine.MaxPageSize + 1
	case r < 10:
		first = w.rng.IntN(engine.MaxPageSize + 1)
	}
	switch w.rng.IntN(3) {
	case 0:
		return first, 0
	case 1:
		if joined := w.joined(g); len(joined) > 0 {
			return first, joined[w.rng.IntN(len(joined))]
		}
	}
	return first, w.member()
}

// joined lists who ever joined group g, per the model.
func (w *workload) joined(g arg) []engine.UserID {
	if id, ok := w.model.byName[g.name]; ok {
		return w.model.s.(*refmodel.Model).Joined(engine.GroupID(id))
	}
	return nil
}

// sender returns the sender of message m per the model, or any user.
func (w *workload) sender(m arg) engine.UserID {
	if id, ok := w.model.byName[m.name]; ok {
		if msg, err := w.model.s.(*refmodel.Model).MessageInfo(engine.MessageID(id)); err == nil {
			return msg.Sender
		}
	}
	return w.member()
}

func render(v any) string { return fmt.Sprintf("%+v", v) }

func renderArgs(as []arg) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return "[" + strings.Join(s, " ") + "]"
}

func (w *workload) gen() op {
	r := w.rng.IntN(51)
	switch r {
	case 0, 1, 2:
		v := w.user()
		key := w.key()
		var id arg
		switch r := w.rng.IntN(10); {
		case r < 6:
			id = arg{}
		case r < 8:
			id = arg{raw: snowflake.Make(w.clk.Now().UnixMilli(), 1000, uint64(w.rng.IntN(4)))}
		case r < 9:
			id = w.pick(kPost) // an existing one: refused unless a retry
		default:
			id = arg{raw: 12345} // not a snowflake of a plausible time
		}
		return op{fmt.Sprintf("createPost u%d id=%s key=%q", v, id, key), func(sd *side) string {
			p, err := sd.s.CreatePost(ctx, v, engine.PostID(id.id(sd)), key)
			if err != nil {
				return errClass(err)
			}
			return sd.ref(kPost, uint64(p))
		}}
	case 3:
		ps := w.picks(kPost, 5)
		return op{"posts " + renderArgs(ps), func(sd *side) string {
			r, err := sd.s.Posts(ctx, ids[engine.PostID](sd, ps))
			if err != nil {
				return errClass(err)
			}
			return render(r)
		}}
	case 4:
		v := w.user()
		ps := w.picks(kPost, 5)
		want := engine.PageWant{Counts: w.rng.IntN(2) == 0, Liked: w.rng.IntN(2) == 0, Favorited: w.rng.IntN(2) == 0,
			Reactions: w.rng.IntN(2) == 0, ViewerReaction: w.rng.IntN(2) == 0}
		return op{fmt.Sprintf("page u%d %s %+v", v, renderArgs(ps), want), func(sd *side) string {
			out := make([]engine.PostView, len(ps))
			if err := sd.s.Page(ctx, v, ids[engine.PostID](sd, ps), want, out); err != nil {
				return errClass(err)
			}
			return render(out)
		}}
	case 5, 6:
		ps := w.picks(kPost, 4)
		return op{"counts " + renderArgs(ps), func(sd *side) string {
			r, err := sd.s.Counts(ctx, ids[engine.PostID](sd, ps))
			if err != nil {
				return errClass(err)
			}
			return render(r)
		}}
	case 7:
		v := w.user()
		ps := w.picks(kPost, 4)
		fav := w.rng.IntN(2) == 0
		return op{fmt.Sprintf("liked/favorited(%v) u%d %s", fav, v, renderArgs(ps)), func(sd *side) string {
			f := sd.s.Liked
			if fav {
				f = sd.s.Favorited
			}
			r, err := f(ctx, v, ids[engine.PostID](sd, ps))
			if err != nil {
				return errClass(err)
			}
			return render(r)
		}}
	case 8, 9, 10, 11:
		v := w.user()
		p := w.pick(kPost)
		which := w.rng.IntN(4)
		name := []string{"like", "unlike", "favorite", "unfavorite"}[which]
		return op{fmt.Sprintf("%s u%d %s", name, v, p), func(sd *side) string {
			fn := []func(context.Context, engine.UserID, engine.PostID) error{sd.s.Like, sd.s.Unlike, sd.s.Favorite, sd.s.Unfavorite}[which]
			return errClass(fn(ctx, v, engine.PostID(p.id(sd))))
		}}
	case 12, 13:
		v := w.user()
		p := w.pick(kPost)
		ms := w.users(3)
		key := w.key()
		c := w.commentID()
		return op{fmt.Sprintf("comment u%d %s #%d mentions=%v key=%q", v, p, c, ms, key), func(sd *side) string {
			return errClass(sd.s.Comment(ctx, v, engine.PostID(p.id(sd)), engine.CommentID(c), ms, key))
		}}
	case 48, 49:
		// Reactions: mostly a kind of the deployment, most often like,
		// some switches (a user reacting again), now and then an unknown
		// kind.
		v := w.user()
		p := w.pick(kPost)
		kind := "like"
		switch r := w.rng.IntN(20); {
		case r == 0:
			kind = "nope"
		case r < 8:
			kind = w.kinds[w.rng.IntN(len(w.kinds))]
		}
		return op{fmt.Sprintf("reactToPost u%d %s %s", v, p, kind), func(sd *side) string {
			if err := sd.s.ReactToPost(ctx, v, engine.PostID(p.id(sd)), kind); err != nil {
				return errClass(err)
			}
			out := make([]engine.PostView, 1)
			err := sd.s.Page(ctx, v, []engine.PostID{engine.PostID(p.id(sd))}, engine.PageWant{Reactions: true, ViewerReaction: true}, out)
			return errClass(err) + render(out[0].Reactions.Count[:len(sd.s.ReactionKinds())]) + " " + out[0].ViewerReaction
		}}
	case 50:
		v := w.user()
		p := w.pick(kPost)
		return op{fmt.Sprintf("unreactToPost u%d %s", v, p), func(sd *side) string {
			return errClass(sd.s.UnreactToPost(ctx, v, engine.PostID(p.id(sd))))
		}}
	case 43, 44:
		a := engine.Actor{User: w.user(), Privileged: w.rng.IntN(4) == 0}
		p := w.pick(kPost)
		c := w.commentID()
		return op{fmt.Sprintf("deleteComment %+v %s #%d", a, p, c), func(sd *side) string {
			return errClass(sd.s.DeleteComment(ctx, a, engine.PostID(p.id(sd)), engine.CommentID(c)))
		}}
	case 45, 46:
		a := engine.Actor{User: w.user(), Privileged: w.rng.IntN(4) == 0}
		p := w.pick(kPost)
		return op{fmt.Sprintf("deletePost %+v %s", a, p), func(sd *side) string {
			return errClass(sd.s.DeletePost(ctx, a, engine.PostID(p.id(sd))))
		}}
	case 47:
		if w.rng.IntN(3) != 0 {
			return w.gen() // erasures are rarer
		}
		u := w.user()
		if w.rng.IntN(3) == 0 {
			u = w.member()
		}
		return op{fmt.Sprintf("eraseUser u%d", u), func(sd *side) string {
			return errClass(sd.s.EraseUser(ctx, u))
		}}
	case 14:
		v := w.user()
		p := w.pick(kPost)
		ms := w.users(3)
		key := w.key()
		return op{fmt.Sprintf("repost u%d %s mentions=%v key=%q", v, p, ms, key), func(sd *side) string {
			r, err := sd.s.Repost(ctx, v, engine.PostID(p.id(sd)), ms, key)
			if err != nil {
				return errClass(err)
			}
			return sd.ref(kPost, uint64(r))
		}}
	case 15:
		ps := w.picks(kPost, 5)
		if w.rng.IntN(30) == 0 {
			ps = append(ps, arg{})
		}
		return op{"recordViews " + renderArgs(ps), func(sd *side) string {
			return errClass(sd.s.RecordViews(ctx, ids[engine.PostID](sd, ps)))
		}}
	case 16:
		us := w.users(4)
		if w.rng.IntN(40) == 0 {
			us = append(us, 0)
		}
		return op{fmt.Sprintf("userCounts %v", us), func(sd *side) string {
			r, err := sd.s.UserCounts(ctx, us)
			if err != nil {
				return errClass(err)
			}
			return render(r)
		}}
	case 17, 18:
		v, u := w.user(), w.user()
		unf := w.rng.IntN(3) == 0
		return op{fmt.Sprintf("follow(unfollow=%v) u%d u%d", unf, v, u), func(sd *side) string {
			if unf {
				return errClass(sd.s.Unfollow(ctx, v, u))
			}
			return errClass(sd.s.Follow(ctx, v, u))
		}}
	case 19:
		v := w.validUser()
		return op{fmt.Sprintf("followees u%d", v), func(sd *side) string {
			r, err := sd.s.Followees(ctx, v)
			if err != nil {
				return errClass(err)
			}
			slices.Sort(r)
			return render(r)
		}}
	case 20, 21, 22, 23:
		v := w.user()
		return op{fmt.Sprintf("unread u%d", v), func(sd *side) string {
			r, err := sd.s.Unread(ctx, v)
			if err != nil {
				return errClass(err)
			}
			return render(r)
		}}
	case 24, 25:
		v := w.user()
		k := engine.UnreadKind(1 + w.rng.IntN(6))
		if w.rng.IntN(40) == 0 {
			k = engine.UnreadKind(w.rng.IntN(2) * 7)
		}
		return op{fmt.Sprintf("markRead u%d %v", v, k), func(sd *side) string {
			return errClass(sd.s.MarkRead(ctx, v, k))
		}}
	case 26:
		v := w.user()
		push := w.rng.IntN(2) == 0
		return op{fmt.Sprintf("redDot(push=%v) u%d", push, v), func(sd *side) string {
			if push {
				return errClass(sd.s.PushRedDot(ctx))
			}
			return errClass(sd.s.ClickRedDot(ctx, v))
		}}
	case 27:
		title := fmt.Sprintf("t%d", w.rng.IntN(3))
		if w.rng.IntN(30) == 0 {
			title = ""
		}
		body := fmt.Sprintf("b%d", w.rng.IntN(2))
		key := w.key()
		return op{fmt.Sprintf("publish %q %q key=%q", title, body, key), func(sd *side) string {
			n, err := sd.s.PublishNotification(ctx, title, body, key)
			if err != nil {
				return errClass(err)
			}
			return renderNotif(sd, n)
		}}
	case 28:
		first := w.rng.IntN(5)
		if w.rng.IntN(30) == 0 {
			first = -1
		}
		after := arg{}
		if w.rng.IntN(2) == 0 {
			after = w.pick(kNotif)
		}
		return op{fmt.Sprintf("notifications first=%d after=%s", first, after), func(sd *side) string {
			r, err := sd.s.Notifications(ctx, first, engine.NotificationID(after.id(sd)))
			if err != nil {
				return errClass(err)
			}
			s := make([]string, len(r))
			for i, n := range r {
				s[i] = renderNotif(sd, n)
			}
			return "[" + strings.Join(s, " ") + "]"
		}}
	case 29:
		v := w.user()
		ms := w.users(4)
		if w.rng.IntN(8) == 0 {
			ms = w.crowd()
		}
		if w.rng.IntN(30) == 0 {
			ms = append(ms, 0)
		}
		return op{fmt.Sprintf("createGroup u%d %v", v, ms), func(sd *side) string {
			g, err := sd.s.CreateGroup(ctx, v, ms)
			if err != nil {
				return errClass(err)
			}
			return sd.ref(kGroup, uint64(g))
		}}
	case 30:
		v := w.user()
		g := w.pick(kGroup)
		us := w.users(3)
		if w.rng.IntN(4) == 0 {
			us = w.crowd()
		}
		return op{fmt.Sprintf("addGroupMembers u%d %s %v", v, g, us), func(sd *side) string {
			return errClass(sd.s.AddGroupMembers(ctx, v, engine.GroupID(g.id(sd)), us))
		}}
	case 31:
		v := w.member()
		g := w.pick(kGroup)
		return op{fmt.Sprintf("leaveGroup u%d %s", v, g), func(sd *side) string {
			r, err := sd.s.LeaveGroup(ctx, v, engine.GroupID(g.id(sd)))
			if err != nil {
				return errClass(err)
			}
			return fmt.Sprintf("%s count=%d %v", sd.ref(kGroup, uint64(r.ID)), r.MemberCount, r.Members)
		}}
	case 32:
		v := w.member()
		g := w.pick(kGroup)
		return op{fmt.Sprintf("group u%d %s", v, g), func(sd *side) string {
			r, err := sd.s.Group(ctx, v, engine.GroupID(g.id(sd)))
			if err != nil {
				return errClass(err)
			}
			return fmt.Sprintf("%s count=%d %v", sd.ref(kGroup, uint64(r.ID)), r.MemberCount, r.Members)
		}}
	case 33, 34:
		v := w.member()
		g := w.pick(kGroup)
		text := fmt.Sprintf("hi%d", w.rng.IntN(3))
		if w.rng.IntN(40) == 0 {
			text = ""
		}
		ms := w.users(2)
		key := w.key()
		return op{fmt.Sprintf("sendMessage u%d %s %q mentions=%v key=%q", v, g, text, ms, key), func(sd *side) string {
			m, err := sd.s.SendMessage(ctx, v, engine.GroupID(g.id(sd)), text, ms, key)
			if err != nil {
				return errClass(err)
			}
			return renderMsg(sd, m)
		}}
	case 35:
		v := w.validUser()
		m := w.pick(kMsg)
		return op{fmt.Sprintf("message u%d %s", v, m), func(sd *side) string {
			r, err := sd.s.Message(ctx, v, engine.MessageID(m.id(sd)))
			if err != nil {
				return errClass(err)
			}
			return renderMsg(sd, r)
		}}
	case 36, 37:
		v := w.member()
		ms := w.picks(kMsg, 3)
		return op{fmt.Sprintf("markMessagesRead u%d %s", v, renderArgs(ms)), func(sd *side) string {
			r, err := sd.s.MarkMessagesRead(ctx, v, ids[engine.MessageID](sd, ms))
			if err != nil {
				return errClass(err)
			}
			s := make([]string, len(r))
			for i, m := range r {
				s[i] = renderMsg(sd, m)
			}
			return "[" + strings.Join(s, " ") + "]"
		}}
	case 38:
		m := w.pick(kMsg)
		v := w.member()
		if w.rng.IntN(2) == 0 {
			v = w.sender(m)
		}
		limit := w.rng.IntN(4)
		if w.rng.IntN(4) == 0 {
			limit = w.rng.IntN(engine.MaxPageSize + 20)
		}
		if w.rng.IntN(30) == 0 {
			limit = -1
		}
		return op{fmt.Sprintf("receipts u%d %s limit=%d", v, m, limit), func(sd *side) string {
			r, err := sd.s.Receipts(ctx, v, engine.MessageID(m.id(sd)), limit)
			if err != nil {
				return errClass(err)
			}
			return fmt.Sprintf("read=%d unread=%d readers=%v unreaders=%v", r.ReadCount, r.UnreadCount, r.Readers, r.Unreaders)
		}}
	case 40, 41:
		// One page of a group's members, from a cursor of someone who
		// joined (or not).
		v := w.member()
		g := w.pick(kGroup)
		first, after := w.page(g)
		return op{fmt.Sprintf("groupMembers u%d %s first=%d after=%d", v, g, first, after), func(sd *side) string {
			r, err := sd.s.GroupMembers(ctx, v, engine.GroupID(g.id(sd)), first, after)
			if err != nil {
				return errClass(err)
			}
			return render(r)
		}}
	case 42:
		m := w.pick(kMsg)
		v := w.member()
		if w.rng.IntN(2) == 0 {
			v = w.sender(m)
		}
		readers := w.rng.IntN(2) == 0
		first, after := w.page(arg{})
		if ms, ok := w.model.byName[m.name]; ok && w.rng.IntN(2) == 0 {
			if msg, err := w.model.s.(*refmodel.Model).MessageInfo(engine.MessageID(ms)); err == nil {
				g := arg{kind: kGroup, name: w.model.ids[kGroup][uint64(msg.Group)]}
				first, after = w.page(g)
			}
		}
		return op{fmt.Sprintf("receiptMembers u%d %s readers=%v first=%d after=%d", v, m, readers, first, after), func(sd *side) string {
			r, err := sd.s.ReceiptMembers(ctx, v, engine.MessageID(m.id(sd)), readers, first, after)
			if err != nil {
				return errClass(err)
			}
			return render(r)
		}}
	default:
		// Import: replace counts of known and new posts, reaction kinds'
		// included. A row's reaction counts are by kind name here, and
		// by each side's own kind ids (ImportKinds) when applied.
		rows := make([]engine.ImportRow, 1+w.rng.IntN(3))
		posts := make([]arg, len(rows))
		reactions := make([]map[string]int64, len(rows))
		for i := range rows {
			if w.rng.IntN(2) == 0 {
				posts[i] = w.pick(kPost)
			} else {
				posts[i] = arg{kind: kPost, raw: snowflake.Make(w.clk.Now().UnixMilli()-int64(w.rng.IntN(1e6)), 1002, uint64(i))}
			}
			if w.rng.IntN(2) == 0 {
				rows[i].Author = w.validUser()
			}
			if w.rng.IntN(3) != 0 {
				rows[i].Counts = engine.Counts{Likes: int64(w.rng.IntN(5)), Comments: int64(w.rng.IntN(3)), Views: int64(w.rng.IntN(100))}
			}
			if w.rng.IntN(2) == 0 {
				reactions[i] = map[string]int64{}
				for range 1 + w.rng.IntN(2) {
					if kind := w.kinds[w.rng.IntN(len(w.kinds))]; kind != "like" {
						reactions[i][kind] = int64(w.rng.IntN(4))
					}
				}
			}
		}
		return op{fmt.Sprintf("import %s %+v %v", renderArgs(posts), rows, reactions), func(sd *side) string {
			im, ok := sd.s.(engine.Importer)
			if !ok {
				return "no importer"
			}
			kinds := im.ImportKinds()
			rs := slices.Clone(rows)
			for i := range rs {
				rs[i].Post = engine.PostID(posts[i].id(sd))
				for kind, n := range reactions[i] {
					rs[i].Reactions[kinds.ID(kind)-2] = n
				}
			}
			if err := im.Import(ctx, rs); err != nil {
				return errClass(err)
			}
			// Imported ids the workload made up become handles, so
			// later ops pick them; known ones keep theirs.
			for _, r := range rs {
				if r.Author != 0 || r.HasCounts() {
					sd.ref(kPost, uint64(r.Post))
				}
			}
			return ""
		}}
	}
}

func renderNotif(sd *side, n engine.Notification) string {
	return fmt.Sprintf("{%s %q %q %s}", sd.ref(kNotif, uint64(n.ID)), n.Title, n.Body, n.CreatedAt.UTC().Format(time.RFC3339Nano))
}

func renderMsg(sd *side, m engine.Message) string {
	return fmt.Sprintf("{%s %s u%d %q %s}", sd.ref(kMsg, uint64(m.ID)), sd.ref(kGroup, uint64(m.Group)), m.Sender, m.Text, m.SentAt.UTC().Format(time.RFC3339Nano))
}
