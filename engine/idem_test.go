package engine

import (
	"errors"
	"testing"
)

func TestIdemFingerprint(t *testing.T) {
	base := IdemArgs{Post: 7, Group: 3, Mentions: []UserID{5, 6}, Text: "t", Title: "a", Body: "b"}
	fp := IdemFingerprint(IdemComment, base)
	if fp == 0 {
		t.Fatal("fingerprint 0")
	}
	same := base
	same.Mentions = []UserID{6, 5, 6}
	if IdemFingerprint(IdemComment, same) != fp {
		t.Fatal("mention order or duplicates changed the fingerprint")
	}
	for name, a := range map[string]IdemArgs{
		"post":     {Post: 8, Group: 3, Mentions: []UserID{5, 6}, Text: "t", Title: "a", Body: "b"},
		"group":    {Post: 7, Group: 4, Mentions: []UserID{5, 6}, Text: "t", Title: "a", Body: "b"},
		"mentions": {Post: 7, Group: 3, Mentions: []UserID{5}, Text: "t", Title: "a", Body: "b"},
		"text":     {Post: 7, Group: 3, Mentions: []UserID{5, 6}, Text: "u", Title: "a", Body: "b"},
		"title":    {Post: 7, Group: 3, Mentions: []UserID{5, 6}, Text: "t", Title: "ab", Body: ""},
		"body":     {Post: 7, Group: 3, Mentions: []UserID{5, 6}, Text: "t", Title: "a", Body: "c"},
	} {
		if IdemFingerprint(IdemComment, a) == fp {
			t.Errorf("another %s, same fingerprint", name)
		}
	}
	if IdemFingerprint(IdemRepost, base) == fp {
		t.Error("another kind, same fingerprint")
	}
	if err := CheckIdemReuse(fp, fp); err != nil {
		t.Fatal(err)
	}
	if err := CheckIdemReuse(0, fp); !errors.Is(err, ErrInvalid) {
		t.Fatalf("a record without fingerprint: %v, want ErrInvalid", err)
	}
	if err := CheckIdemReuse(fp+1, fp); !errors.Is(err, ErrInvalid) {
		t.Fatalf("reuse: %v, want ErrInvalid", err)
	}
}
