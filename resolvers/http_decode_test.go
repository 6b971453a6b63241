package resolvers

import (
	"reflect"
	"testing"
)

// FuzzDecodeBodyFast: whatever the hand decoder accepts, encoding/json
// (decodeObject and postParams' checks) accepts too and decodes to the
// same parameters. What it refuses goes to encoding/json, so refusing is
// always safe; accepting differently is the bug this looks for.
func FuzzDecodeBodyFast(f *testing.F) {
	for _, s := range []string{
		`{"query":"{ a }"}`,
		` {"query" : "query($ids: [ID!]!) { posts(ids: $ids) { id } }",
		  "variables": {"ids": ["1", "2", 3, -4.5e+6, true, null, [], {}]}, "operationName": null}`,
		`{"query":"q\n\t\"\\\/\u00e9\ud83d\ude00","operationName":"Op","extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab"}}}`,
		`{"extensions":{"persistedQuery":{"version":1}},"query":null}`,
		`{"query":"a","query":"b","variables":{"x":1,"x":{"y":[1,[2,[3]]]}}}`,
		`{"query":"q","variables":[]}`,
		`{"query":"q","unknown":{"deep":[[[[{"a":"\u0000"}]]]]}}`,
		`{"query":"\ud800"}`,
		"{\"query\":\"\xff\"}",
		`{"query":"q"} x`,
		`{"query":"q",}`,
		`{"query":"q","variables":{"n":01}}`,
		`{"query":"é","variables":{"n":-0.0E-0}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, ok := decodeBodyFast(string(body))
		if !ok {
			return
		}
		want, err := paramsFromBody(body)
		if err != nil {
			t.Fatalf("hand decoder accepted what encoding/json refuses (%s):\n%q\n%+v", err.msg, body, got)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded differently:\n%q\nhand:          %#v\nencoding/json: %#v", body, got, want)
		}
	})
}

// TestDecodeBodyFastTakesCommonBodies: the bodies clients send are
// decoded by hand, not handed to encoding/json (the fuzz test alone would
// pass a decoder that refused everything).
func TestDecodeBodyFastTakesCommonBodies(t *testing.T) {
	for _, s := range []string{
		`{"query":"query Feed($ids: [ID!]!) { posts(ids: $ids) { id } }","variables":{"ids":["1","2"]}}`,
		`{"operationName":"Feed","variables":{"ids":["1"],"s":true},"query":"query Feed($ids: [ID!]!, $s: Boolean!) {\n  posts(ids: $ids) { id @skip(if: $s) }\n}\n"}`,
		`{"query":"{ viewer { id } }","operationName":null,"variables":null,"extensions":null}`,
		`{"extensions":{"persistedQuery":{"version":1,"sha256Hash":"ab"}}}`,
		`{"query":"{ a(s: \"\u00e9\\n\") }","variables":{"n":12.5e-3,"b":false,"z":null}}`,
	} {
		if _, ok := decodeBodyFast(s); !ok {
			t.Errorf("left to encoding/json: %s", s)
		}
	}
}
