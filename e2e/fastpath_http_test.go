package e2e

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"reflect"
	"sort"
	"testing"
	"unicode/utf16"

	"github.com/tally-dev/tally/web/transport"
)

// TestPlanContextsAgreeWithGqlgen: the differential test's generated requests,
// each answered three times by the fast-path handler (differ), reach
// the operation contexts planContexts makes without gqlgen's
// CreateOperationContext (web/transport/plan_context.go) and hand-written
// bodies reach the hand decoder, and still answer byte for byte what
// gqlgen alone answers.
func TestPlanContextsAgreeWithGqlgen(t *testing.T) {
	d := newDiffPair(t)
	g := &gen{r: rand.New(rand.NewPCG(11, 7)), d: d}
	fast0 := transport.FastOperationContexts()
	for range 600 {
		d.compare(t, g.request())
	}
	// About half the generated operations are plan-served; each is
	// answered twice after it was learnt.
	if n := transport.FastOperationContexts() - fast0; n < 300 {
		t.Fatalf("planContexts made %d operation contexts for 600 requests", n)
	}
}

// handEncode writes r's POST body as a client other than encoding/json
// might: whitespace between tokens, escaped slashes and non-ASCII, keys in
// another order, null for absent parameters, an unknown key. Which of
// these it uses follows from the query's hash, so a request is always
// written the same way.
func handEncode(r request) []byte {
	h := fnv.New64a()
	h.Write([]byte(r.Query))
	e := handEncoder{style: h.Sum64()}
	type kv struct {
		k string
		v any
	}
	fields := []kv{{"query", r.Query}}
	if r.OperationName != "" || e.bit(0) {
		var op any
		if r.OperationName != "" {
			op = r.OperationName
		}
		fields = append(fields, kv{"operationName", op})
	}
	if r.Variables != nil || e.bit(1) {
		var v any
		if r.Variables != nil {
			v = r.Variables
		}
		fields = append(fields, kv{"variables", v})
	}
	if r.Extensions != nil {
		fields = append(fields, kv{"extensions", r.Extensions})
	}
	if e.bit(2) {
		fields = append(fields, kv{"x-client", map[string]any{"n": []any{json.Number("1.5e3"), true, nil, "é"}}})
	}
	if e.bit(3) {
		sort.Slice(fields, func(i, j int) bool { return fields[i].k > fields[j].k })
	}
	e.space()
	e.b = append(e.b, '{')
	for i, f := range fields {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		e.space()
		e.str(f.k)
		e.space()
		e.b = append(e.b, ':')
		e.space()
		e.value(f.v)
		e.space()
	}
	e.b = append(e.b, '}')
	e.space()
	return e.b
}

type handEncoder struct {
	b     []byte
	style uint64
	n     uint
}

func (e *handEncoder) bit(i uint) bool { return e.style>>(i%64)&1 == 1 }

func (e *handEncoder) space() {
	e.n++
	if e.bit(4 + e.n%13) {
		e.b = append(e.b, []string{" ", "\n", "\t ", "\r\n  "}[e.n%4]...)
	}
}

func (e *handEncoder) str(s string) {
	escapeAll := e.bit(20)
	e.b = append(e.b, '"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			e.b = append(e.b, '\\', byte(r))
		case r == '/' && escapeAll:
			e.b = append(e.b, `\/`...)
		case r == '\n':
			e.b = append(e.b, `\n`...)
		case r == '\t':
			e.b = append(e.b, `\t`...)
		case r < 0x20 || r >= 0x80 && escapeAll || r == 0x2028 || r == 0x2029:
			if r >= 0x10000 {
				r1, r2 := utf16.EncodeRune(r)
				e.b = fmt.Appendf(e.b, `\u%04x\u%04X`, r1, r2)
			} else {
				e.b = fmt.Appendf(e.b, `\u%04x`, r)
			}
		default:
			e.b = append(e.b, string(r)...)
		}
	}
	e.b = append(e.b, '"')
}

func (e *handEncoder) value(v any) {
	switch v := v.(type) {
	case string:
		e.str(v)
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		e.b = append(e.b, '{')
		for i, k := range keys {
			if i > 0 {
				e.b = append(e.b, ',')
			}
			e.space()
			e.str(k)
			e.b = append(e.b, ':')
			e.space()
			e.value(v[k])
		}
		e.b = append(e.b, '}')
	default:
		rv := reflect.ValueOf(v)
		if v != nil && rv.Kind() == reflect.Slice {
			e.b = append(e.b, '[')
			for i := range rv.Len() {
				if i > 0 {
					e.b = append(e.b, ',')
				}
				e.space()
				e.value(rv.Index(i).Interface())
			}
			e.space()
			e.b = append(e.b, ']')
			return
		}
		j, _ := json.Marshal(v)
		e.b = append(e.b, j...)
	}
}
