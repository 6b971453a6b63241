package transport

import (
	"encoding/json"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
)

// A hand decoder for the common POST body, {"query": …, "operationName":
// …, "variables": {…}, "extensions": {…}}. encoding/json decodes it into
// map[string]any through reflection, one allocation per token and a
// second scan of every literal; on a 50-post page that was an eighth of
// what the server spent. decodeBodyFast produces exactly what
// decodeObject followed by postParams' checks produce (values as
// encoding/json with UseNumber makes them: string, json.Number, bool,
// nil, []any, map[string]any), or reports !ok, and the caller then runs
// the encoding/json path, which also writes every error message. It
// leaves to that path whatever it does not need to be fast for: invalid
// or unusual JSON (a lone surrogate escape, invalid UTF-8, nesting deeper
// than maxFastDepth), a parameter of the wrong type, a body without a
// query. FuzzDecodeBodyFast holds it to encoding/json.

// maxFastDepth bounds the nesting the hand decoder follows (arrays and
// objects inside variables); deeper bodies take the encoding/json path.
const maxFastDepth = 64

// decodeBodyFast decodes body (already read whole). The strings in the
// variables it returns share body's memory: a plan-served query keeps none
// of them past its request, and the transport gives any other operation
// copies (ownStrings) before gqlgen's resolvers can store one (an
// idempotency key, a message) and with it the whole body.
func decodeBodyFast(body string) (*graphql.RawParams, bool) {
	d := fastDecoder{s: body}
	d.space()
	if !d.eat('{') {
		return nil, false
	}
	p := &graphql.RawParams{}
	d.space()
	if !d.eat('}') {
		for {
			d.space()
			key, ok := d.str()
			if !ok {
				return nil, false
			}
			d.space()
			if !d.eat(':') {
				return nil, false
			}
			d.space()
			v, ok := d.value(1)
			if !ok {
				return nil, false
			}
			// The types postParams accepts; any other is its error to write.
			switch key {
			case "query", "operationName":
				s, isStr := v.(string)
				if v != nil && !isStr {
					return nil, false
				}
				if key == "query" {
					p.Query = s
				} else {
					p.OperationName = s
				}
			case "variables", "extensions":
				m, isObj := v.(map[string]any)
				if v != nil && !isObj {
					return nil, false
				}
				if key == "variables" {
					p.Variables = m
				} else {
					p.Extensions = m
				}
			}
			d.space()
			if d.eat(',') {
				continue
			}
			if !d.eat('}') {
				return nil, false
			}
			break
		}
	}
	d.space()
	if d.i != len(d.s) || p.Query == "" && p.Extensions["persistedQuery"] == nil {
		return nil, false
	}
	// The parameters kept beyond the request get memory of their own, not
	// the body's: the query (query cache, persisted queries), the
	// operation name and the extensions (a persisted query's hash).
	p.Query, p.OperationName = strings.Clone(p.Query), strings.Clone(p.OperationName)
	if p.Extensions != nil {
		p.Extensions = ownStrings(p.Extensions).(map[string]any)
	}
	return p, true
}

type fastDecoder struct {
	s string
	i int
}

func (d *fastDecoder) space() {
	for d.i < len(d.s) {
		switch d.s[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) eat(c byte) bool {
	if d.i < len(d.s) && d.s[d.i] == c {
		d.i++
		return true
	}
	return false
}

func (d *fastDecoder) value(depth int) (any, bool) {
	if d.i >= len(d.s) || depth > maxFastDepth {
		return nil, false
	}
	switch c := d.s[d.i]; {
	case c == '"':
		s, ok := d.str()
		return s, ok
	case c == '{':
		d.i++
		m := map[string]any{}
		d.space()
		if d.eat('}') {
			return m, true
		}
		for {
			d.space()
			k, ok := d.str()
			if !ok {
				return nil, false
			}
			d.space()
			if !d.eat(':') {
				return nil, false
			}
			d.space()
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			m[k] = v // a repeated key: the last wins, as in encoding/json
			d.space()
			if d.eat(',') {
				continue
			}
			return m, d.eat('}')
		}
	case c == '[':
		d.i++
		// Count the elements of a flat array of scalars first, so that
		// a list of ids is allocated once.
		l := make([]any, 0, d.countFlat())
		d.space()
		if d.eat(']') {
			return l, true
		}
		for {
			d.space()
			v, ok := d.value(depth + 1)
			if !ok {
				return nil, false
			}
			l = append(l, v)
			d.space()
			if d.eat(',') {
				continue
			}
			return l, d.eat(']')
		}
	case c == 't':
		return true, d.lit("true")
	case c == 'f':
		return false, d.lit("false")
	case c == 'n':
		return nil, d.lit("null")
	case c == '-' || '0' <= c && c <= '9':
		return d.number()
	}
	return nil, false
}

// countFlat estimates the elements of the array starting at d.i by its
// commas up to the first bracket or brace; a guess only (commas inside
// strings count too), used as a capacity.
func (d *fastDecoder) countFlat() int {
	n := 1
	for j := d.i; j < len(d.s) && n < 1024; j++ {
		switch d.s[j] {
		case ',':
			n++
		case ']', '[', '{', '}':
			return n
		}
	}
	return n
}

func (d *fastDecoder) lit(word string) bool {
	if len(d.s)-d.i >= len(word) && d.s[d.i:d.i+len(word)] == word {
		d.i += len(word)
		return true
	}
	return false
}

// number scans JSON's number grammar and keeps the literal as a
// json.Number, as encoding/json does with UseNumber.
func (d *fastDecoder) number() (any, bool) {
	start := d.i
	d.eat('-')
	switch {
	case d.eat('0'):
	case d.i < len(d.s) && '1' <= d.s[d.i] && d.s[d.i] <= '9':
		d.digits()
	default:
		return nil, false
	}
	if d.eat('.') {
		if d.digits() == 0 {
			return nil, false
		}
	}
	if d.i < len(d.s) && (d.s[d.i] == 'e' || d.s[d.i] == 'E') {
		d.i++
		if !d.eat('+') {
			d.eat('-')
		}
		if d.digits() == 0 {
			return nil, false
		}
	}
	return json.Number(d.s[start:d.i]), true
}

func (d *fastDecoder) digits() int {
	start := d.i
	for d.i < len(d.s) && '0' <= d.s[d.i] && d.s[d.i] <= '9' {
		d.i++
	}
	return d.i - start
}

// str decodes a JSON string at d.i. A string without escapes is a slice
// of the body; escapes are decoded as encoding/json decodes them, except
// that a surrogate escape not followed by its pair and invalid UTF-8 (which
// encoding/json replaces with U+FFFD) are left to encoding/json.
func (d *fastDecoder) str() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	ascii := true
	for d.i < len(d.s) {
		c := d.s[d.i]
		switch {
		case c == '"':
			s := d.s[start:d.i]
			d.i++
			if !ascii && !utf8.ValidString(s) {
				return "", false
			}
			return s, true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		case c >= 0x80:
			ascii = false
		}
		d.i++
	}
	return "", false
}

// escaped decodes the rest of a string with escapes, from its start.
func (d *fastDecoder) escaped(start int) (string, bool) {
	b := make([]byte, 0, d.i-start+16)
	b = append(b, d.s[start:d.i]...)
	for d.i < len(d.s) {
		c := d.s[d.i]
		switch {
		case c == '"':
			d.i++
			if !utf8.Valid(b) {
				return "", false
			}
			return string(b), true
		case c < 0x20:
			return "", false
		case c != '\\':
			b = append(b, c)
			d.i++
			continue
		}
		if d.i+1 >= len(d.s) {
			return "", false
		}
		e := d.s[d.i+1]
		d.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := d.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				if !d.lit(`\u`) {
					return "", false
				}
				r2, ok := d.hex4()
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (d *fastDecoder) hex4() (rune, bool) {
	if len(d.s)-d.i < 4 {
		return 0, false
	}
	v, err := strconv.ParseUint(d.s[d.i:d.i+4], 16, 32)
	if err != nil {
		return 0, false
	}
	d.i += 4
	return rune(v), true
}

// ownStrings returns v with every string (keys, values, json.Numbers) in
// memory of its own, and new maps and slices holding them.
func ownStrings(v any) any {
	switch v := v.(type) {
	case string:
		return strings.Clone(v)
	case json.Number:
		return json.Number(strings.Clone(string(v)))
	case map[string]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			m[strings.Clone(k)] = ownStrings(e)
		}
		return m
	case []any:
		l := make([]any, len(v))
		for i, e := range v {
			l[i] = ownStrings(e)
		}
		return l
	}
	return v
}
