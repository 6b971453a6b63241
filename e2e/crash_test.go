package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tally-dev/tally/web/auth"
)

// crashModel is what the test did: every op attempted, with whether it was
// acknowledged. After a crash, every unacknowledged op is retried (likes
// and follows are idempotent by nature, the rest carry idempotency keys),
// so the final state must match the attempts exactly: nothing lost,
// nothing applied twice.
type crashModel struct {
	mu       sync.Mutex
	posts    []string // created before the first crash; author = owners[i]
	owners   []uint64
	group    string
	messages []string
	ops      map[string]crashOp // by op key
}

type crashOp struct {
	query string
	vars  map[string]any
	user  uint64
	admin bool
	acked bool
}

func TestCrashRecoveryKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test starts real processes")
	}
	dir := t.TempDir()
	keys, _ := auth.NewKeys([]byte(crashSecret))
	c := &crashClient{http: httpClient(), keys: keys}
	m := &crashModel{ops: map[string]crashOp{}}
	rng := rand.New(rand.NewPCG(1, uint64(time.Now().UnixNano())))

	// Set-up: authors, posts, a group with one message per member to read.
	p := startTally(t, dir)
	const authors, posts, likers = 5, 20, 40
	for i := range posts {
		owner := uint64(1 + i%authors)
		d, err := c.call(p.url, owner, false, `mutation { createPost { id } }`, nil)
		if err != nil {
			t.Fatal(err)
		}
		var r struct{ CreatePost struct{ ID string } }
		json.Unmarshal(d, &r)
		m.posts = append(m.posts, r.CreatePost.ID)
		m.owners = append(m.owners, owner)
	}
	members := make([]string, 0, likers)
	for u := range likers {
		members = append(members, fmt.Sprint(100+u))
	}
	d, err := c.call(p.url, 1, false, `mutation($m: [ID!]!) { createGroup(memberIds: $m) { id } }`, map[string]any{"m": members})
	if err != nil {
		t.Fatal(err)
	}
	var g struct{ CreateGroup struct{ ID string } }
	json.Unmarshal(d, &g)
	m.group = g.CreateGroup.ID
	for i := range 3 {
		d, err := c.call(p.url, 1, false, `mutation($g: ID!, $t: String!) { sendMessage(groupId: $g, text: $t) { id } }`, map[string]any{"g": m.group, "t": fmt.Sprint("m", i)})
		if err != nil {
			t.Fatal(err)
		}
		var s struct{ SendMessage struct{ ID string } }
		json.Unmarshal(d, &s)
		m.messages = append(m.messages, s.SendMessage.ID)
	}

	// Rounds: drive concurrent mutations, kill -9 at a random moment,
	// restart, retry what was not acknowledged, check.
	const rounds = 4
	seq := 0
	for round := range rounds {
		ctx, stop := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		var seqMu sync.Mutex
		nextSeq := func() int { seqMu.Lock(); defer seqMu.Unlock(); seq++; return seq }
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(uint64(round), uint64(w)))
				for ctx.Err() == nil {
					op := m.randomOp(r, nextSeq())
					m.run(c, p.url, op)
				}
			}()
		}
		time.Sleep(time.Duration(300+rng.IntN(700)) * time.Millisecond)
		p.kill9()
		stop()
		wg.Wait()

		p = startTally(t, dir)
		m.retryUnacked(t, c, p.url)
		m.check(t, c, p.url, round)
	}
	acked := 0
	for _, op := range m.ops {
		if op.acked {
			acked++
		}
	}
	t.Logf("%d rounds, %d distinct ops, all acknowledged after retries", rounds, acked)
}

func (m *crashModel) randomOp(r *rand.Rand, seq int) (key string) {
	var op crashOp
	switch r.IntN(6) {
	case 0, 1: // like: idempotent by nature
		u, pi := uint64(100+r.IntN(40)), r.IntN(len(m.posts))
		key = fmt.Sprintf("like %d %d", u, pi)
		op = crashOp{query: `mutation($p: ID!) { likePost(postId: $p) { id } }`, vars: map[string]any{"p": m.posts[pi]}, user: u}
	case 2: // comment with a key and a mention
		u, pi := uint64(100+r.IntN(40)), r.IntN(len(m.posts))
		key = fmt.Sprintf("comment %d", seq)
		op = crashOp{query: `mutation($p: ID!, $k: String, $m: [ID!]) { commentOnPost(postId: $p, idempotencyKey: $k, mentions: $m) { id } }`,
			vars: map[string]any{"p": m.posts[pi], "k": key, "m": []string{"7"}}, user: u}
	case 3: // follow an author
		u, a := uint64(100+r.IntN(40)), 1+r.IntN(5)
		key = fmt.Sprintf("follow %d %d", u, a)
		op = crashOp{query: `mutation($a: ID!) { follow(userId: $a) { id } }`, vars: map[string]any{"a": fmt.Sprint(a)}, user: u}
	case 4: // read a message
		u, mi := uint64(100+r.IntN(40)), r.IntN(len(m.messages))
		key = fmt.Sprintf("read %d %d", u, mi)
		op = crashOp{query: `mutation($ids: [ID!]!) { markMessagesRead(messageIds: $ids) { id } }`, vars: map[string]any{"ids": []string{m.messages[mi]}}, user: u}
	case 5: // broadcast with a key
		key = fmt.Sprintf("notice %d", seq)
		op = crashOp{query: `mutation($k: String) { publishSystemNotification(title: "n", body: "b", idempotencyKey: $k) { id } }`, vars: map[string]any{"k": key}, user: 1, admin: true}
	}
	m.mu.Lock()
	if old, ok := m.ops[key]; ok && old.acked {
		m.mu.Unlock()
		return key
	}
	m.ops[key] = op
	m.mu.Unlock()
	return key
}

func (m *crashModel) run(c *crashClient, url, key string) {
	m.mu.Lock()
	op := m.ops[key]
	m.mu.Unlock()
	if op.acked {
		return
	}
	if _, err := c.call(url, op.user, op.admin, op.query, op.vars); err == nil {
		m.mu.Lock()
		op.acked = true
		m.ops[key] = op
		m.mu.Unlock()
	}
}

func (m *crashModel) retryUnacked(t *testing.T, c *crashClient, url string) {
	t.Helper()
	for key, op := range m.ops {
		if op.acked {
			continue
		}
		if _, err := c.call(url, op.user, op.admin, op.query, op.vars); err != nil {
			t.Fatalf("retry %s: %v", key, err)
		}
		op.acked = true
		m.ops[key] = op
	}
}

func (m *crashModel) check(t *testing.T, c *crashClient, url string, round int) {
	t.Helper()
	likes := make([]int64, len(m.posts))
	comments := make([]int64, len(m.posts))
	authorLikes := map[uint64]int64{}
	followers := map[string]int64{}
	reads := make([]int64, len(m.messages))
	var notices, mentions int64
	postIndex := map[string]int{}
	for i, p := range m.posts {
		postIndex[p] = i
	}
	msgIndex := map[string]int{}
	for i, id := range m.messages {
		msgIndex[id] = i
	}
	for key, op := range m.ops {
		switch {
		case strings.HasPrefix(key, "like "):
			i := postIndex[op.vars["p"].(string)]
			likes[i]++
			authorLikes[m.owners[i]]++
		case strings.HasPrefix(key, "comment "):
			comments[postIndex[op.vars["p"].(string)]]++
			mentions++
		case strings.HasPrefix(key, "follow "):
			followers[op.vars["a"].(string)]++
		case strings.HasPrefix(key, "read "):
			reads[msgIndex[op.vars["ids"].([]string)[0]]]++
		case strings.HasPrefix(key, "notice "):
			notices++
		}
	}
	d, err := c.call(url, 1, false, `query($ids: [ID!]!) { posts(ids: $ids) { counts { likes comments } } }`, map[string]any{"ids": m.posts})
	if err != nil {
		t.Fatal(err)
	}
	var page struct {
		Posts []struct {
			Counts struct{ Likes, Comments int64 }
		}
	}
	json.Unmarshal(d, &page)
	for i, p := range page.Posts {
		if p.Counts.Likes != likes[i] || p.Counts.Comments != comments[i] {
			t.Fatalf("round %d post %d: likes %d comments %d, want %d %d", round, i, p.Counts.Likes, p.Counts.Comments, likes[i], comments[i])
		}
	}
	for a := uint64(1); a <= 5; a++ {
		d, err := c.call(url, a, false, `{ viewer { unread { likes } user { followerCount } } }`, nil)
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Viewer struct {
				Unread struct{ Likes int64 }
				User   struct{ FollowerCount int64 }
			}
		}
		json.Unmarshal(d, &v)
		if v.Viewer.Unread.Likes != authorLikes[a] || v.Viewer.User.FollowerCount != followers[fmt.Sprint(a)] {
			t.Fatalf("round %d author %d: unread likes %d followers %d, want %d %d", round, a, v.Viewer.Unread.Likes, v.Viewer.User.FollowerCount, authorLikes[a], followers[fmt.Sprint(a)])
		}
	}
	d, err = c.call(url, 7, false, `{ viewer { unread { mentions } } systemNotifications(first: 100) { id } }`, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v7 struct {
		Viewer              struct{ Unread struct{ Mentions int64 } }
		SystemNotifications []struct{ ID string }
	}
	json.Unmarshal(d, &v7)
	if v7.Viewer.Unread.Mentions != mentions || int64(len(v7.SystemNotifications)) != min(notices, 100) {
		t.Fatalf("round %d: mentions %d notices %d, want %d %d", round, v7.Viewer.Unread.Mentions, len(v7.SystemNotifications), mentions, notices)
	}
	for i, id := range m.messages {
		d, err := c.call(url, 1, false, `query($m: ID!) { message(id: $m) { readReceipts { readCount } } }`, map[string]any{"m": id})
		if err != nil {
			t.Fatal(err)
		}
		var r struct {
			Message struct{ ReadReceipts struct{ ReadCount int64 } }
		}
		json.Unmarshal(d, &r)
		if r.Message.ReadReceipts.ReadCount != reads[i] {
			t.Fatalf("round %d message %d: read %d, want %d", round, i, r.Message.ReadReceipts.ReadCount, reads[i])
		}
	}
}
