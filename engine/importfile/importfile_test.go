package importfile

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
)

func readAll(t *testing.T, in string, f Format) (rows []engine.ImportRow, bad []*RowError) {
	t.Helper()
	r, err := NewReader(strings.NewReader(in), "in", f)
	if err != nil {
		t.Fatal(err)
	}
	for {
		row, err := r.Next()
		var re *RowError
		switch {
		case err == io.EOF:
			return
		case errors.As(err, &re):
			bad = append(bad, re)
		case err != nil:
			t.Fatal(err)
		default:
			rows = append(rows, row)
		}
	}
}

func TestCSV(t *testing.T) {
	in := "\ufeffID,Author_ID,like_count,comment_count,repost_count,view_count,favor_count,extra\n" +
		"100,7,1,2,3,4,5,x\n" +
		"101,,0,9,,,,\n" +
		"abc,1,1,1,1,1,1,1\n" +
		"102,1,-5,0,0,0,0,0\n" +
		"103,1,9223372036854775807,0,0,0,0,0\n" +
		"104,1,9223372036854775808,0,0,0,0,0\n"
	rows, bad := readAll(t, in, CSV)
	want := []engine.ImportRow{
		{Post: 100, Author: 7, Counts: engine.Counts{Likes: 1, Comments: 2, Reposts: 3, Views: 4, Favorites: 5}},
		{Post: 101, Counts: engine.Counts{Comments: 9}},
		{Post: 103, Author: 1, Counts: engine.Counts{Likes: 1<<63 - 1}},
	}
	if len(rows) != len(want) {
		t.Fatalf("rows = %+v", rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
	var lines []int
	for _, b := range bad {
		lines = append(lines, b.Line)
		if !strings.HasPrefix(b.Error(), "in:") {
			t.Errorf("error %q does not name the file", b)
		}
	}
	if len(lines) != 3 || lines[0] != 4 || lines[1] != 5 || lines[2] != 7 {
		t.Errorf("bad lines = %v, want [4 5 7]", lines)
	}
}

func TestCSVHeaderWithoutPostID(t *testing.T) {
	if _, err := NewReader(strings.NewReader("likes,views\n1,2\n"), "f.csv", CSV); err == nil {
		t.Fatal("want an error for a header without a post id column")
	}
}

func TestNDJSON(t *testing.T) {
	in := `{"msg_id": 5, "USER_ID": "8", "likes": 3, "views": 1000000000000}` + "\n\n" +
		`{"post_id": "6", "favorites": null}` + "\n" +
		`not json` + "\n" +
		`{"likes": 1}` + "\n" +
		`{"id": 7, "likes": 1.5}` + "\n"
	rows, bad := readAll(t, in, NDJSON)
	if len(rows) != 2 || rows[0] != (engine.ImportRow{Post: 5, Author: 8, Counts: engine.Counts{Likes: 3, Views: 1e12}}) || rows[1] != (engine.ImportRow{Post: 6}) {
		t.Fatalf("rows = %+v", rows)
	}
	if len(bad) != 3 || bad[0].Line != 4 || bad[1].Line != 5 || bad[2].Line != 6 {
		t.Fatalf("bad = %v", bad)
	}
}

func TestFormatOf(t *testing.T) {
	for name, want := range map[string]Format{"a.csv": CSV, "-": CSV, "x.NDJSON": NDJSON, "x.jsonl": NDJSON} {
		if FormatOf(name) != want {
			t.Errorf("FormatOf(%q) wrong", name)
		}
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("id,likes\n1,2\n"), false)
	f.Add([]byte(`{"id":1,"likes":2}`+"\n"), true)
	f.Add([]byte("id,likes\n\"1,2\n"), false)
	f.Fuzz(func(t *testing.T, data []byte, ndjson bool) {
		format := CSV
		if ndjson {
			format = NDJSON
		}
		r, err := NewReader(strings.NewReader(string(data)), "fuzz", format)
		if err != nil {
			return
		}
		for range 10000 {
			row, err := r.Next()
			var re *RowError
			if err == io.EOF || (err != nil && !errors.As(err, &re)) {
				return
			}
			if err == nil && (row.Post == 0 || row.Counts.Likes < 0) {
				t.Fatalf("accepted a bad row %+v", row)
			}
		}
	})
}

// TestCSVRowShape: a row with fewer fields than the header is refused (its
// missing counts would otherwise replace real counts with zeros), so is a
// row with more, and every rejection names the column it is about.
func TestCSVRowShape(t *testing.T) {
	in := "post_id,author_id,likes,comments\n" +
		"100,7,1,2\n" +
		"101,7,1\n" +
		"102,7,1,2,3\n" +
		"103,7,x,2\n" +
		",7,1,2\n"
	rows, bad := readAll(t, in, CSV)
	if len(rows) != 1 || rows[0].Post != 100 {
		t.Fatalf("rows = %+v, want only post 100", rows)
	}
	want := []struct {
		line int
		says string
	}{
		{3, "no value for column comments"},
		{4, "field 5 has no column"},
		{5, "column likes: "},
		{6, "column post_id"},
	}
	if len(bad) != len(want) {
		t.Fatalf("rejections = %v, want %d", bad, len(want))
	}
	for i, w := range want {
		if bad[i].Line != w.line || !strings.Contains(bad[i].Error(), w.says) {
			t.Errorf("rejection %d = %q (line %d), want line %d saying %q", i, bad[i], bad[i].Line, w.line, w.says)
		}
	}
}

func TestNDJSONNamesTheKey(t *testing.T) {
	_, bad := readAll(t, `{"post_id": 1, "likes": "many"}`+"\n", NDJSON)
	if len(bad) != 1 || !strings.Contains(bad[0].Error(), "key likes: ") {
		t.Fatalf("rejections = %v, want one naming key likes", bad)
	}
}
