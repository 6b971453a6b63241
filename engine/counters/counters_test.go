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
