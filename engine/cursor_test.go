package engine

import (
	"testing"
	"time"
)

func TestCursorExpired(t *testing.T) {
	const ttl = 30 * 24 * time.Hour
	day := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	cases := []struct {
		seen, now string
		expired   bool
	}{
		// Active at any time of 2026-01-10: kept until 2026-02-10T00:00Z.
		{"2026-01-10T00:00:00Z", "2026-02-09T23:59:59.999999999Z", false},
		{"2026-01-10T23:59:59Z", "2026-02-09T23:59:59.999999999Z", false},
		{"2026-01-10T00:00:00Z", "2026-02-10T00:00:00Z", true},
		{"2026-01-10T23:59:59Z", "2026-02-10T00:00:00Z", true},
		{"2026-01-11T00:00:00Z", "2026-02-10T00:00:00Z", false},
		// A time zone does not move the day: days are UTC.
		{"2026-01-10T23:30:00-05:00", "2026-02-10T12:00:00Z", false},
	}
	for _, c := range cases {
		if got := CursorExpired(day(c.seen), day(c.now), ttl); got != c.expired {
			t.Errorf("CursorExpired(%s, %s) = %v, want %v", c.seen, c.now, got, c.expired)
		}
	}
	if !CursorExpired(time.Time{}, day("2026-01-10T00:00:00Z"), ttl) {
		t.Error("a user never active has no live cursor")
	}
	if got := ActivityDayStart(day("1969-12-31T12:00:00Z")); !got.Equal(day("1969-12-31T00:00:00Z")) {
		t.Errorf("day start before 1970 = %v", got)
	}
}

func TestIdemExpired(t *testing.T) {
	at := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	if IdemExpired(at, at.Add(IdempotencyTTL-time.Nanosecond)) {
		t.Error("expired before its TTL")
	}
	if !IdemExpired(at, at.Add(IdempotencyTTL)) {
		t.Error("kept at its TTL")
	}
}
