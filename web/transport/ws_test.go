package transport

import (
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"
)

func TestSubscribeParams(t *testing.T) {
	good := map[string]string{
		`{"query":"{ a }"}`: "{ a }",
		`{"query":"{ a }","operationName":null,"variables":null,"extensions":null}`:     "{ a }",
		`{"query":"q","operationName":"Op","variables":{"n":18446744073709551615}}`:     "q",
		`{"query":"q","extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab"}}}`: "q",
		` {"query":"q"} `: "q",
	}
	for raw, q := range good {
		p, err := subscribeParams(json.RawMessage(raw))
		if err != nil || p.Query != q {
			t.Errorf("%s: %+v %v", raw, p, err)
		}
	}
	// Long variables stay exact (json.Number, not float64).
	p, _ := subscribeParams(json.RawMessage(`{"query":"q","variables":{"n":18446744073709551615}}`))
	if n, ok := p.Variables["n"].(json.Number); !ok || n.String() != "18446744073709551615" {
		t.Errorf("variable n = %#v", p.Variables["n"])
	}
	bad := []string{``, `null`, `"q"`, `[]`, `{}`, `{"query":1}`, `{"query":null}`, `{"query":"q","operationName":1}`,
		`{"query":"q","variables":[1]}`, `{"query":"q","variables":"x"}`, `{"query":"q","extensions":2}`, `{"query":"q"`}
	for _, raw := range bad {
		if p, err := subscribeParams(json.RawMessage(raw)); err == nil {
			t.Errorf("%s accepted as %+v", raw, p)
		}
	}
}

func TestMessageIDAndPayloadShape(t *testing.T) {
	for raw, want := range map[string]bool{`"a"`: true, `"1"`: true, `""`: false, `1`: false, `null`: false, ``: false, `["a"]`: false} {
		if _, ok := messageID(json.RawMessage(raw)); ok != want {
			t.Errorf("id %s: %v", raw, ok)
		}
	}
	for raw, want := range map[string]bool{``: true, `null`: true, `{}`: true, ` {"a":1}`: true, `"x"`: false, `[]`: false, `1`: false} {
		if objectOrAbsent(json.RawMessage(raw)) != want {
			t.Errorf("payload %s: want %v", raw, want)
		}
	}
}

func TestAuthorizationOf(t *testing.T) {
	cases := []struct {
		p      map[string]any
		header string
		ok     bool
	}{
		{nil, "", true},
		{map[string]any{}, "", true},
		{map[string]any{"Authorization": "Bearer x"}, "Bearer x", true},
		{map[string]any{"authorization": "Bearer y"}, "Bearer y", true},
		{map[string]any{"Authorization": "", "authorization": "Bearer y"}, "Bearer y", true},
		{map[string]any{"Authorization": nil}, "", true},
		{map[string]any{"Authorization": 5}, "", false},
		{map[string]any{"Authorization": map[string]any{}}, "", false},
	}
	for _, c := range cases {
		h, ok := authorizationOf(c.p)
		if h != c.header || ok != c.ok {
			t.Errorf("%v: %q %v", c.p, h, ok)
		}
	}
}

func TestTruncateReason(t *testing.T) {
	if s := truncateReason("short"); s != "short" {
		t.Fatal(s)
	}
	long := strings.Repeat("é", 100) // 200 bytes
	s := truncateReason(long)
	if len(s) > 123 || !utf8.ValidString(s) || !strings.HasPrefix(long, s) {
		t.Fatalf("%d bytes, valid %v", len(s), utf8.ValidString(s))
	}
}

func TestWSSlots(t *testing.T) {
	s := newWSSlots(2)
	r1, ok1 := s.acquire("u")
	r2, ok2 := s.acquire("u")
	_, ok3 := s.acquire("u")
	if !ok1 || !ok2 || ok3 {
		t.Fatalf("%v %v %v", ok1, ok2, ok3)
	}
	if _, ok := s.acquire("v"); !ok {
		t.Fatal("another key was refused")
	}
	r1()
	r1() // a release counts once
	if s.count("u") != 1 {
		t.Fatalf("count %d", s.count("u"))
	}
	r2()
	if s.count("u") != 0 || len(s.open) != 1 {
		t.Fatalf("count %d, keys %v", s.count("u"), s.open)
	}
	unlimited := newWSSlots(-1)
	var wg sync.WaitGroup
	for range 100 {
		wg.Go(func() {
			if _, ok := unlimited.acquire("k"); !ok {
				t.Error("refused without a cap")
			}
		})
	}
	wg.Wait()
	if unlimited.count("k") != 100 {
		t.Fatalf("count %d", unlimited.count("k"))
	}
}

func TestWSMessages(t *testing.T) {
	var m struct {
		Type    string
		ID      string
		Payload json.RawMessage
	}
	for _, b := range [][]byte{
		dataMessage("next", `a"b`, []byte(`{"data":{}}`)),
		dataMessage("complete", "x", nil),
		controlMessage("pong", nil),
		controlMessage("pong", json.RawMessage(`null`)),
		controlMessage("pong", json.RawMessage(`{"t":1}`)),
	} {
		if err := json.Unmarshal(b, &m); err != nil || m.Type == "" {
			t.Errorf("%s: %v", b, err)
		}
	}
	if string(controlMessage("pong", nil)) != `{"type":"pong"}` {
		t.Error(string(controlMessage("pong", nil)))
	}
	json.Unmarshal(dataMessage("next", `a"b`, []byte(`{"data":{}}`)), &m)
	if m.ID != `a"b` || string(m.Payload) != `{"data":{}}` {
		t.Errorf("%+v", m)
	}
}

func TestWSConfigDefaults(t *testing.T) {
	d := WSConfig{}.withDefaults()
	if d.InitTimeout != 10*time.Second || d.PingInterval != 20*time.Second || d.WriteTimeout != 10*time.Second ||
		d.SendQueueBytes != 256<<10 || d.MaxPerUser != 16 || d.MaxSubscriptions != 100 || d.ReadLimit != 1<<20 {
		t.Fatalf("%+v", d)
	}
	n := WSConfig{InitTimeout: -1, PingInterval: -1, WriteTimeout: -1, SendQueueBytes: -1, MaxPerUser: -1, MaxSubscriptions: -1}.withDefaults()
	if n.InitTimeout != 10*time.Second || n.WriteTimeout != 10*time.Second || n.SendQueueBytes != 256<<10 {
		t.Fatalf("a negative timeout or queue must not cut every socket: %+v", n)
	}
	if n.PingInterval != -1 || n.MaxPerUser != -1 || n.MaxSubscriptions != -1 {
		t.Fatalf("negative ping interval and caps mean off: %+v", n)
	}
}
