// Package importfile reads existing post counts for `tally import`: CSV
// with a header row, or NDJSON (one JSON object per line). It owns the
// column vocabulary of API.md (post_id/id/msg_id, user_id/author_id,
// likes/like_count, ..., and <kind>_count or <kind>s for each reaction
// kind of the deployment but like; case-insensitive; other columns
// ignored, and listed by Ignored; missing counts 0) and promises that
// every row is either returned whole or rejected with its file and line —
// never half-read.
package importfile

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/counters"
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

// column roles, by lower-cased name: colKind+k is the count of reaction
// kind k (not like, whose count is colLikes).
const (
	colIgnore = iota
	colPost
	colAuthor
	colLikes
	colComments
	colReposts
	colViews
	colFavorites
	colKind
)

// fixedColumns are the columns of every deployment. A reaction kind whose
// column would take one of their names (a kind named "view") is read from
// neither: the fixed count keeps its name.
var fixedColumns = map[string]int{
	"post_id": colPost, "id": colPost, "msg_id": colPost,
	"user_id": colAuthor, "author_id": colAuthor,
	"likes": colLikes, "like_count": colLikes,
	"comments": colComments, "comment_count": colComments,
	"reposts": colReposts, "repost_count": colReposts,
	"views": colViews, "view_count": colViews,
	"favorites": colFavorites, "favor_count": colFavorites,
}

// columnsOf returns the column roles of a deployment with the reaction
// kinds of kinds (nil: like alone): the fixed columns, then <kind>_count
// and <kind>s for each kind but like.
func columnsOf(kinds *counters.Kinds) map[string]int {
	cols := maps.Clone(fixedColumns)
	if kinds == nil {
		return cols
	}
	for _, id := range kinds.IDs() {
		if id == counters.Like {
			continue
		}
		for _, name := range [...]string{kinds.Name(id) + "_count", kinds.Name(id) + "s"} {
			if _, taken := cols[name]; !taken {
				cols[name] = colKind + int(id)
			}
		}
	}
	return cols
}

// maxIgnored bounds the ignored column names a reader remembers: NDJSON
// rows may each bring new keys.
const maxIgnored = 32

// Reader yields rows from one file.
type Reader struct {
	file    string
	format  Format
	columns map[string]int // role by lower-cased name
	ignored []string       // names of the ignored columns seen, as first written
	// CSV
	csv   *csv.Reader
	cols  []int
	names []string // the header's column names, as written, for errors
	// NDJSON
	lines *bufio.Scanner
	line  int
}

// NewReader reads r, named file in errors, with the columns of a
// deployment whose reaction kinds are kinds (the store's kinds table,
// engine.Importer.ImportKinds; nil: like alone). For CSV it reads the
// header now and fails if it names no post-id column.
func NewReader(r io.Reader, file string, format Format, kinds *counters.Kinds) (*Reader, error) {
	rd := &Reader{file: file, format: format, columns: columnsOf(kinds)}
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
		rd.cols[i] = rd.columns[h]
		if rd.cols[i] == colIgnore {
			rd.ignore(rd.names[i])
		}
		hasPost = hasPost || rd.cols[i] == colPost
	}
	if !hasPost {
		return nil, &RowError{file, 1, errors.New("the header names no post id column (post_id, id or msg_id)")}
	}
	return rd, nil
}

// ignore notes that column name was ignored (its first characters: a key
// may be most of a long line).
func (r *Reader) ignore(name string) {
	name = truncate(name)
	if len(r.ignored) < maxIgnored && !slices.ContainsFunc(r.ignored, func(n string) bool { return strings.EqualFold(n, name) }) {
		r.ignored = append(r.ignored, name)
	}
}

// Ignored returns the names of the columns (CSV header names, NDJSON
// keys) read so far that name nothing imported, at most maxIgnored of
// them: an operator sees a misspelt count column (lovee_count) that would
// otherwise import as zeros.
func (r *Reader) Ignored() []string { return r.ignored }

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
		row, err := r.parseJSON(b)
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

func (r *Reader) parseJSON(b []byte) (engine.ImportRow, error) {
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&obj); err != nil {
		return engine.ImportRow{}, fmt.Errorf("not a JSON object: %v", err)
	}
	var row engine.ImportRow
	var seenPost bool
	for k, raw := range obj {
		col := r.columns[strings.ToLower(k)]
		if col == colIgnore {
			r.ignore(k)
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
		default:
			row.Reactions[col-colKind-2] = c
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
