package counters

import (
	"errors"
	"strings"
	"testing"
)

func TestParseKinds(t *testing.T) {
	got, err := ParseKinds(" like,love ,haha")
	if err != nil || strings.Join(got, ",") != "like,love,haha" {
		t.Fatalf("ParseKinds = %v %v", got, err)
	}
	for _, bad := range []string{
		"",               // no like
		"love,haha",      // no like
		"like,like",      // twice
		"like,Love",      // upper case
		"like,1st",       // a digit first
		"like,thumbs-up", // a dash
		"like,",          // an empty name
		"like," + strings.Repeat("x", MaxKindName+1),
		"like,a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p", // 17 kinds
	} {
		if _, err := ParseKinds(bad); err == nil {
			t.Errorf("ParseKinds(%q) accepted", bad)
		}
	}
	if _, err := ParseKinds("like,a,b,c,d,e,f,g,h,i,j,k,l,m,n,o"); err != nil {
		t.Errorf("16 kinds refused: %v", err)
	}
}

func TestKindsPut(t *testing.T) {
	var k Kinds
	for _, c := range []struct {
		id   Kind
		name string
		ok   bool
	}{
		{Like, "like", true},
		{Like, "like", false},      // named twice
		{2, "like", false},         // like is id 1
		{1, "love", false},         // id 1 is like
		{2, "love", true},          //
		{3, "love", false},         // a name with two ids
		{0, "haha", false},         // NoKind
		{MaxKinds + 1, "x", false}, // beyond MaxKinds
		{MaxKinds, "wow", true},
		{4, "Bad", false},
	} {
		if err := k.Put(c.id, c.name); (err == nil) != c.ok {
			t.Errorf("Put(%d, %q) = %v, want ok %v", c.id, c.name, err, c.ok)
		}
	}
	if k.Len() != 3 || k.ID("wow") != MaxKinds || k.Name(2) != "love" || k.Has(3) || k.Name(200) != "" {
		t.Fatalf("table %v", k.IDs())
	}
}

func TestReconcile(t *testing.T) {
	noTotals := func() (Totals, error) { t.Fatal("totals walked with no kind left out"); return Totals{}, nil }
	k, err := NewKinds().Reconcile([]string{"like", "love", "haha"}, noTotals)
	if err != nil || k.ID("love") != 2 || k.ID("haha") != 3 {
		t.Fatalf("new kinds: %v %v", k.IDs(), err)
	}
	// Reordered and one added: ids stay, the new one takes the next.
	k, err = k.Reconcile([]string{"haha", "wow", "like", "love"}, noTotals)
	if err != nil || k.ID("love") != 2 || k.ID("haha") != 3 || k.ID("wow") != 4 {
		t.Fatalf("reordered: %v %v", k.IDs(), err)
	}
	// love left out while counted: refused, naming it and its count.
	var totals Totals
	totals[Like], totals[2], totals[4] = 100, 7, 0
	_, err = k.Reconcile([]string{"like", "haha", "wow"}, func() (Totals, error) { return totals, nil })
	var inUse *KindInUseError
	if !errors.As(err, &inUse) || inUse.Name != "love" || inUse.Count != 7 || !strings.Contains(err.Error(), `"love"`) {
		t.Fatalf("a counted kind left out: %v", err)
	}
	// wow left out with no count: dropped, its id free for the next kind.
	k, err = k.Reconcile([]string{"like", "love", "haha", "sad"}, func() (Totals, error) { return totals, nil })
	if err != nil || k.ID("wow") != NoKind || k.ID("sad") != 4 || k.Len() != 4 {
		t.Fatalf("an unused kind left out: %v %v", k.IDs(), err)
	}
	// Counts under an id with no name (damaged data) are refused too.
	totals[9] = 3
	if _, err := k.Reconcile([]string{"like"}, func() (Totals, error) { return totals, nil }); !errors.As(err, &inUse) {
		t.Fatalf("counts of an unnamed id: %v", err)
	}
	// The totals' error is returned.
	boom := errors.New("boom")
	if _, err := k.Reconcile([]string{"like"}, func() (Totals, error) { return Totals{}, boom }); !errors.Is(err, boom) {
		t.Fatalf("totals error: %v", err)
	}
	// More kinds than ids.
	many := []string{"like"}
	for _, c := range "abcdefghijklmnop" {
		many = append(many, string(c))
	}
	if _, err := NewKinds().Reconcile(many, noTotals); err == nil {
		t.Fatal("17 kinds reconciled")
	}
}

func TestReactions(t *testing.T) {
	var r Reactions
	if !r.IsZero() {
		t.Fatal("zero Reactions not zero")
	}
	r.Add(2, 5)
	r.Add(MaxKinds, -3)
	if r.Get(2) != 5 || r.Get(MaxKinds) != 0 || r.IsZero() {
		t.Fatalf("%v", r)
	}
}
