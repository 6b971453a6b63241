package counters

import "testing"

func TestFieldNames(t *testing.T) {
	seen := map[string]bool{}
	for f := Likes; f < NumFields; f++ {
		name := f.String()
		if name == "invalid" || seen[name] {
			t.Fatalf("field %d: name %q missing or repeated", f, name)
		}
		seen[name] = true
	}
	if s := Field(NumFields).String(); s != "invalid" {
		t.Fatalf("Field(NumFields) = %q, want invalid", s)
	}
}

func TestAddStaysWithinBounds(t *testing.T) {
	cases := []struct{ cur, delta, want int64 }{
		{0, 1, 1},
		{5, -3, 2},
		{2, -3, Floor},
		{0, -1 << 62, Floor},
		{Ceiling, 1, Ceiling},
		{Ceiling - 1, 5, Ceiling},
		{Ceiling, -1, Ceiling - 1},
	}
	for _, c := range cases {
		if got := Add(c.cur, c.delta); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.cur, c.delta, got, c.want)
		}
	}
}
