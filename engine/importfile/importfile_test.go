package importfile

import (
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
)

func readAll(t *testing.T, in string, f Format) (rows []engine.ImportRow, bad []*RowError) {
	t.Helper()
	_, rows, bad = readWith(t, in, f, nil)
	return rows, bad
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
	if _, err := NewReader(strings.NewReader("likes,views\n1,2\n"), "f.csv", CSV, nil); err == nil {
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

// testKinds is a deployment's kinds table: love is id 2, haha 3, sad 4.
func testKinds(t testing.TB) *counters.Kinds {
	kinds, err := counters.NewKinds().Reconcile([]string{"like", "love", "haha", "sad"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &kinds
}

// readWith reads in with the columns of kinds (nil: like alone).
func readWith(t *testing.T, in string, f Format, kinds *counters.Kinds) (r *Reader, rows []engine.ImportRow, bad []*RowError) {
	t.Helper()
	r, err := NewReader(strings.NewReader(in), "in", f, kinds)
	if err != nil {
		t.Fatal(err)
	}
	for {
		row, err := r.Next()
		var re *RowError
		switch {
		case err == io.EOF:
			return r, rows, bad
		case errors.As(err, &re):
			bad = append(bad, re)
		case err != nil:
			t.Fatal(err)
		default:
			rows = append(rows, row)
		}
	}
}

// TestReactionColumnsCSV: <kind>_count and <kind>s name the counts of the
// deployment's kinds, in any case; a column naming no kind (a typo, a
// kind the deployment does not have) is ignored and listed; a negative
// or non-integer count is a rejected row with its line.
func TestReactionColumnsCSV(t *testing.T) {
	in := "post_id,LOVE_COUNT,hahas,likes,lovee_count,wows,Sads\n" +
		"100,3,4,5,9,9,6\n" +
		"101,,0,1,,,\n" +
		"102,-1,0,0,0,0,0\n" +
		"103,1,2.5,0,0,0,0\n"
	r, rows, bad := readWith(t, in, CSV, testKinds(t))
	var want0, want1 engine.ImportRow
	want0.Post, want0.Counts.Likes = 100, 5
	want0.Reactions[2-2], want0.Reactions[3-2], want0.Reactions[4-2] = 3, 4, 6
	want1.Post, want1.Counts.Likes = 101, 1
	if len(rows) != 2 || rows[0] != want0 || rows[1] != want1 {
		t.Fatalf("rows = %+v", rows)
	}
	if len(bad) != 2 || bad[0].Line != 4 || !strings.Contains(bad[0].Error(), "column LOVE_COUNT") ||
		bad[1].Line != 5 || !strings.Contains(bad[1].Error(), "column hahas") {
		t.Fatalf("bad = %v", bad)
	}
	if got := strings.Join(r.Ignored(), ","); got != "lovee_count,wows" {
		t.Fatalf("ignored = %q", got)
	}
}

func TestReactionColumnsNDJSON(t *testing.T) {
	in := `{"id": 5, "Loves": 2, "haha_count": "7", "like_count": 1, "wow_count": 3}` + "\n" +
		`{"id": 6, "sad_count": -2}` + "\n" +
		`{"id": 7, "WOW_COUNT": 1}` + "\n"
	r, rows, bad := readWith(t, in, NDJSON, testKinds(t))
	var want engine.ImportRow
	want.Post, want.Counts.Likes = 5, 1
	want.Reactions[2-2], want.Reactions[3-2] = 2, 7
	if len(rows) != 2 || rows[0] != want || rows[1] != (engine.ImportRow{Post: 7}) {
		t.Fatalf("rows = %+v", rows)
	}
	if len(bad) != 1 || bad[0].Line != 2 || !strings.Contains(bad[0].Error(), "sad_count") {
		t.Fatalf("bad = %v", bad)
	}
	// A key ignored on several rows, in several cases, is listed once.
	if got := r.Ignored(); len(got) != 1 || got[0] != "wow_count" {
		t.Fatalf("ignored = %q", got)
	}
}

// TestKindColumnsKeepFixedNames: a kind whose column would be a fixed
// count's name leaves the fixed count its column.
func TestKindColumnsKeepFixedNames(t *testing.T) {
	kinds, err := counters.NewKinds().Reconcile([]string{"like", "view"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	cols := columnsOf(&kinds)
	if cols["views"] != colViews || cols["view_count"] != colViews {
		t.Fatalf("views → %d, view_count → %d", cols["views"], cols["view_count"])
	}
	if len(columnsOf(nil)) != len(fixedColumns) {
		t.Fatal("like alone adds columns")
	}
}

func FuzzReader(f *testing.F) {
	f.Add([]byte("id,likes\n1,2\n"), false)
	f.Add([]byte(`{"id":1,"likes":2}`+"\n"), true)
	f.Add([]byte("id,likes\n\"1,2\n"), false)
	f.Add([]byte("id,love_count,hahas,lovee_count\n1,2,3,4\n2,-1,x,\n"), false)
	f.Add([]byte(`{"id":1,"LOVES":2,"sad_count":"3","wows":1}`+"\n"), true)
	kinds := testKinds(f)
	f.Fuzz(func(t *testing.T, data []byte, ndjson bool) {
		format := CSV
		if ndjson {
			format = NDJSON
		}
		r, err := NewReader(strings.NewReader(string(data)), "fuzz", format, kinds)
		if err != nil {
			return
		}
		for range 10000 {
			row, err := r.Next()
			var re *RowError
			if err == io.EOF || (err != nil && !errors.As(err, &re)) {
				break
			}
			if err != nil {
				continue
			}
			c := row.Counts
			if row.Post == 0 || min(c.Likes, c.Comments, c.Reposts, c.Views, c.Favorites) < 0 {
				t.Fatalf("accepted a bad row %+v", row)
			}
			for j, v := range row.Reactions {
				if v < 0 || v > 0 && !kinds.Has(counters.Kind(j+2)) {
					t.Fatalf("accepted a count %d of kind id %d", v, j+2)
				}
			}
		}
		if len(r.Ignored()) > maxIgnored {
			t.Fatalf("%d ignored names remembered", len(r.Ignored()))
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
