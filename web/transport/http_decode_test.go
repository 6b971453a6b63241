package transport

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unsafe"
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

// TestDecodedStringsKeptApartFromTheBody: what may outlive the request —
// the query, the operation name, the extensions, and the variables once
// ownStrings copied them for gqlgen's resolvers — holds no slice of the
// body, which could pin a body of up to the limit in memory for good.
func TestDecodedStringsKeptApartFromTheBody(t *testing.T) {
	body := `{"query":"mutation M($k: String, $b: [ID!]) { x }","operationName":"M",` +
		`"variables":{"k":"idem-1","b":["1",2],"o":{"n":{"deep":"s"}}},` +
		`"extensions":{"persistedQuery":{"version":1,"sha256Hash":"abc"}}}`
	p, ok := decodeBodyFast(body)
	if !ok {
		t.Fatal("not decoded by hand")
	}
	lo := uintptr(unsafe.Pointer(unsafe.StringData(body)))
	hi := lo + uintptr(len(body))
	var check func(path string, v any)
	check = func(path string, v any) {
		var s string
		switch v := v.(type) {
		case string:
			s = v
		case json.Number:
			s = string(v)
		case map[string]any:
			for k, e := range v {
				check(path+"/"+k, k)
				check(path+"/"+k, e)
			}
			return
		case []any:
			for i, e := range v {
				check(fmt.Sprint(path, "/", i), e)
			}
			return
		default:
			return
		}
		if at := uintptr(unsafe.Pointer(unsafe.StringData(s))); len(s) > 0 && at >= lo && at < hi {
			t.Errorf("%s (%q) is a slice of the body", path, s)
		}
	}
	check("query", p.Query)
	check("operationName", p.OperationName)
	check("extensions", p.Extensions)
	check("variables", ownStrings(p.Variables))
	if !reflect.DeepEqual(ownStrings(p.Variables), p.Variables) {
		t.Fatal("ownStrings changed the variables")
	}
}
