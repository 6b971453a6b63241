// Package importfile reads existing post counts for `tally import`: CSV
// with a header row, or NDJSON (one JSON object per line). It owns the
// column vocabulary of API.md (post_id/id/msg_id, user_id/author_id,
// likes/like_count, ...; case-insensitive; other columns ignored; missing
// counts 0) and promises that every row is either returned whole or
// rejected with its file and line — never half-read.
package importfile

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/engine"
)

// Format of an input file.
type Format uint8

const (
	CSV Format = iota
	NDJSON
)

// FormatOf picks the format from a file name: .ndjson and .jsonl are
// NDJSON, anything else (including "-") is CSV.
func FormatOf(name string) Format {
	n := strings.ToLower(name)
	if strings.HasSuffix(n, ".ndjson") || strings.HasSuffix(n, ".jsonl") {
		return NDJSON
	}
	return CSV
}

// RowError is a rejected row.
type RowError struct {
	File string
	Line int
	Err  error
}

func (e *RowError) Error() string { return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err) }

// column roles, by lower-cased name.
const (
	colIgnore = iota
	colPost
	colAuthor
	colLikes
	colComments
	colReposts
	colViews
	colFavorites
)

var columns = map[string]int{
	"post_id": colPost, "id": colPost, "msg_id": colPost,
	"user_id": colAuthor, "author_id": colAuthor,
	"likes": colLikes, "like_count": colLikes,
	"comments": colComments, "comment_count": colComments,
	"reposts": colReposts, "repost_count": colReposts,
	"views": colViews, "view_count": colViews,
	"favorites": colFavorites, "favor_count": colFavorites,
}

// Reader yields rows from one file.
type Reader struct {
	file   string
	format Format
	// CSV
	csv   *csv.Reader
	cols  []int
	names []string // the header's column names, as written, for errors
	// NDJSON
	lines *bufio.Scanner
	line  int
}

// NewReader reads r, named file in errors. For CSV it reads the header now
// and fails if it names no post-id column.
func NewReader(r io.Reader, file string, format Format) (*Reader, error) {
	rd := &Reader{file: file, format: format}
	if format == NDJSON {
		rd.lines = bufio.NewScanner(r)
		rd.lines.Buffer(make([]byte, 64<<10), 1<<20)
		return rd, nil
	}
	rd.csv = csv.NewReader(r)
	rd.csv.FieldsPerRecord = -1
	rd.csv.ReuseRecord = true
	header, err := rd.csv.Read()
	if err != nil {
		return nil, &RowError{file, 1, fmt.Errorf("reading the header row: %w", err)}
	}
	rd.cols = make([]int, len(header))
	rd.names = make([]string, len(header))
	hasPost := false
	for i, h := range header {
		rd.names[i] = strings.TrimSpace(strings.TrimPrefix(h, "\ufeff"))
		h = strings.ToLower(rd.names[i])
		rd.cols[i] = columns[h]
		hasPost = hasPost || rd.cols[i] == colPost
	}
	if !hasPost {
		return nil, &RowError{file, 1, errors.New("the header names no post id column (post_id, id or msg_id)")}
	}
	return rd, nil
}

// Next returns the next row. A bad row returns a *RowError and the reader
// can go on; io.EOF ends the file; any other error is fatal.
func (r *Reader) Next() (engine.ImportRow, error) {
	if r.format == NDJSON {
		return r.nextJSON()
	}
	rec, err := r.csv.Read()
	if err != nil {
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return engine.ImportRow{}, &RowError{r.file, pe.Line, pe.Err}
		}
		return engine.ImportRow{}, err
	}
	line, _ := r.csv.FieldPos(0)
	// A short row would read its missing counts as zeros and, since an
	// import replaces counts, silently wipe them: it is refused instead.
	if len(rec) < len(r.cols) {
		return engine.ImportRow{}, &RowError{r.file, line, fmt.Errorf("%d fields where the header has %d: no value for column %s",
			len(rec), len(r.cols), strings.Join(r.names[len(rec):], ", "))}
	}
	if len(rec) > len(r.cols) {
		return engine.ImportRow{}, &RowError{r.file, line, fmt.Errorf("%d fields where the header has %d: field %d has no column",
			len(rec), len(r.cols), len(r.cols)+1)}
	}
	var row engine.ImportRow
	var seenPost bool
	for i, v := range rec {
		if r.cols[i] == colIgnore {
			continue
		}
		if err := set(&row, r.cols[i], strings.TrimSpace(v), &seenPost); err != nil {
			return engine.ImportRow{}, &RowError{r.file, line, fmt.Errorf("column %s: %w", r.names[i], err)}
		}
	}
	if err := check(row, seenPost); err != nil {
		return engine.ImportRow{}, &RowError{r.file, line, err}
	}
	return row, nil
}

func (r *Reader) nextJSON() (engine.ImportRow, error) {
	for r.lines.Scan() {
		r.line++
		b := bytes.TrimSpace(r.lines.Bytes())
		if len(b) == 0 {
			continue
		}
		row, err := parseJSON(b)
		if err != nil {
			return engine.ImportRow{}, &RowError{r.file, r.line, err}
		}
		return row, nil
	}
	if err := r.lines.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return engine.ImportRow{}, fmt.Errorf("%s:%d: line longer than 1 MiB", r.file, r.line+1)
		}
		return engine.ImportRow{}, err
	}
	return engine.ImportRow{}, io.EOF
}

func parseJSON(b []byte) (engine.ImportRow, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return engine.ImportRow{}, fmt.Errorf("not a JSON object: %v", err)
	}
	var row engine.ImportRow
	var seenPost bool
	for k, raw := range obj {
		col := columns[strings.ToLower(k)]
		if col == colIgnore {
			continue
		}
		v := strings.TrimSpace(string(raw))
		if v == "null" {
			v = ""
		} else if strings.HasPrefix(v, `"`) {
			if err := json.Unmarshal(raw, &v); err != nil {
				return engine.ImportRow{}, fmt.Errorf("%s: %v", k, err)
			}
		}
		if err := set(&row, col, strings.TrimSpace(v), &seenPost); err != nil {
			return engine.ImportRow{}, fmt.Errorf("key %s: %w", k, err)
		}
	}
	return row, check(row, seenPost)
}

func set(row *engine.ImportRow, col int, v string, seenPost *bool) error {
	if col == colPost {
		*seenPost = true
	}
	if v == "" {
		return nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return fmt.Errorf("%q is not a non-negative integer", truncate(v))
	}
	switch col {
	case colPost:
		row.Post = engine.PostID(n)
	case colAuthor:
		row.Author = engine.UserID(n)
	default:
		if n > math.MaxInt64 {
			return fmt.Errorf("count %s exceeds 2^63-1", v)
		}
		c := int64(n)
		switch col {
		case colLikes:
			row.Counts.Likes = c
		case colComments:
			row.Counts.Comments = c
		case colReposts:
			row.Counts.Reposts = c
		case colViews:
			row.Counts.Views = c
		case colFavorites:
			row.Counts.Favorites = c
		}
	}
	return nil
}

func check(row engine.ImportRow, seenPost bool) error {
	if !seenPost || row.Post == 0 {
		return errors.New("column post_id (or id, msg_id): missing or zero post id")
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 30 {
		return s[:30] + "…"
	}
	return s
}
