package main

import (
	"encoding/json"
	"testing"
)

// scanPush must agree with encoding/json wherever it answers, and answer
// for what the server sends.
func TestScanPush(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want badges
		ok   bool
	}{
		{`{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{"mentions":0,"comments":0,"likes":2,"messages":0,"system":7,"feed":0,"total":9},"redDot":true}}}}`, badges{system: 7, likes: 2, red: true}, true},
		{`{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{"likes":0,"system":1},"redDot":false}}}}`, badges{system: 1}, true},
		{`{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{"system":1},"redDot":false}}}}`, badges{}, false},
		{`{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{"likes":null,"system":1},"redDot":false}}}}`, badges{}, false},
		{`{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{"likes":1,"system":1},"redDot":null}}}}`, badges{}, false},
		{`{"type":"next","id":"1","payload":{"errors":[{"message":"x"}],"data":{"unreadChanged":{"unread":{"likes":1,"system":1},"redDot":true}}}}`, badges{}, false},
		{`{"type":"complete","id":"1"}`, badges{}, false},
		{`{"type":"error","id":"1","payload":[{"message":"x"}]}`, badges{}, false},
	} {
		got, ok := scanPush([]byte(c.msg))
		if ok != c.ok || got != c.want {
			t.Errorf("%s: %+v %v, want %+v %v", c.msg, got, ok, c.want, c.ok)
		}
		if ok {
			checkAgainstJSON(t, []byte(c.msg), got)
		}
	}
}

func FuzzScanPush(f *testing.F) {
	f.Add([]byte(`{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{"mentions":0,"comments":0,"likes":2,"messages":0,"system":7,"feed":0,"total":9},"redDot":true}}}}`))
	f.Add([]byte(`{"type":"next","id":"1","payload":{"data":{"unreadChanged":{"unread":{"likes":-3,"system":1},"redDot":false}}}}`))
	f.Fuzz(func(t *testing.T, msg []byte) {
		if got, ok := scanPush(msg); ok {
			checkAgainstJSON(t, msg, got)
		}
	})
}

func checkAgainstJSON(t *testing.T, msg []byte, got badges) {
	t.Helper()
	var m wsMessage
	if err := json.Unmarshal(msg, &m); err != nil || m.Type != "next" || m.Payload.Data == nil || len(m.Payload.Errors) > 0 {
		t.Fatalf("scanPush accepted %q, which encoding/json reads as %+v (%v)", msg, m, err)
	}
	if want := m.badges(); got != want {
		t.Fatalf("scanPush(%q) = %+v, encoding/json %+v", msg, got, want)
	}
}
