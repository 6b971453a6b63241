package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tally-dev/tally/web/clients"
)

// The graphql-http server audit (npm graphql-http, the GraphQL-over-HTTP
// spec's reference audit) passes with no error, warning or notice against
// a real server.
func TestGraphQLOverHTTPAudit(t *testing.T) {
	s := newTestServer(t)
	out := clients.Run(t, "http-audit.mjs", 60*time.Second, "TALLY_URL="+s.URL+"/query")
	counts := map[string]int{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r struct {
			ID, Name, Status, Reason, ContentType, Body string
			HTTPStatus                                  int
		}
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		counts[r.Status]++
		if r.Status != "ok" {
			t.Errorf("%s %s %s: %s\n  got %d %s %s", r.Status, r.ID, r.Name, r.Reason, r.HTTPStatus, r.ContentType, r.Body)
		}
	}
	t.Logf("audit: %v", counts)
	if counts["ok"] < 55 {
		t.Fatalf("only %d audits ran ok (%v)", counts["ok"], counts)
	}
}

// goTypeRE matches what Go's own error texts put in a message: type names,
// decoder phrasing.
var goTypeRE = regexp.MustCompile(`Go (struct|value)|json: |\b(map|slice|struct|float32|int32)\b|9223372036854775807|map\[|\[\]interface|interface \{\}|\bany\b|json\.Number|float64|int64|uint64|\*[a-z]+\.[A-Z]|unmarshal`)

type httpCase struct {
	name, method, contentType, accept, body, rawQuery string
	status                                            int
	media                                             string // response media type
	code                                              string // first error's extensions.code; "" for none
	data                                              bool   // a data key is present
}

func (c httpCase) do(t *testing.T, url string) (status int, media string, body map[string]json.RawMessage, raw string, hdr http.Header) {
	t.Helper()
	var rd io.Reader
	if c.body != "" {
		rd = strings.NewReader(c.body)
	}
	req, _ := http.NewRequest(c.method, url+"/query"+c.rawQuery, rd)
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	if c.accept != "" {
		req.Header.Set("Accept", c.accept)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	json.Unmarshal(b, &body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), body, string(b), resp.Header
}

// Status codes, media types and error shapes of GraphQL over HTTP.
func TestGraphQLOverHTTPSpec(t *testing.T) {
	s := newTestServer(t)
	const (
		js  = "application/json"
		gql = "application/graphql-response+json"
	)
	cases := []httpCase{
		{name: "query json", method: "POST", contentType: js, accept: js, body: `{"query":"{ __typename }"}`, status: 200, media: js, data: true},
		{name: "query no accept", method: "POST", contentType: js, body: `{"query":"{ __typename }"}`, status: 200, media: js, data: true},
		{name: "query */*", method: "POST", contentType: js, accept: "*/*", body: `{"query":"{ __typename }"}`, status: 200, media: js, data: true},
		{name: "query gql", method: "POST", contentType: js, accept: gql, body: `{"query":"{ __typename }"}`, status: 200, media: gql, data: true},
		{name: "apollo4 accept", method: "POST", contentType: js, accept: gql + ",application/json;q=0.9", body: `{"query":"{ __typename }"}`, status: 200, media: gql, data: true},
		{name: "json preferred by q", method: "POST", contentType: js, accept: gql + ";q=0.5, application/json", body: `{"query":"{ __typename }"}`, status: 200, media: js, data: true},
		{name: "parse error json", method: "POST", contentType: js, accept: js, body: `{"query":"{"}`, status: 200, media: js, code: "BAD_USER_INPUT"},
		{name: "parse error */*", method: "POST", contentType: js, accept: "*/*", body: `{"query":"{"}`, status: 200, media: js, code: "BAD_USER_INPUT"},
		{name: "parse error gql", method: "POST", contentType: js, accept: gql, body: `{"query":"{"}`, status: 400, media: gql, code: "BAD_USER_INPUT"},
		{name: "validation json", method: "POST", contentType: js, body: `{"query":"{ nope }"}`, status: 200, media: js, code: "BAD_USER_INPUT"},
		{name: "validation gql", method: "POST", contentType: js, accept: gql, body: `{"query":"{ nope }"}`, status: 400, media: gql, code: "BAD_USER_INPUT"},
		{name: "coercion gql", method: "POST", contentType: js, accept: gql, body: `{"query":"query($p: ID!) { post(id: $p) { id } }","variables":{"p":null}}`, status: 400, media: gql, code: "BAD_USER_INPUT"},
		{name: "unauthenticated json", method: "POST", contentType: js, body: `{"query":"{ viewer { id } }"}`, status: 200, media: js, code: "UNAUTHENTICATED", data: true},
		{name: "not JSON", method: "POST", contentType: js, accept: js, body: `{"query": "{ viewer { id } `, status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "not JSON gql", method: "POST", contentType: js, accept: gql, body: `{"query`, status: 400, media: gql, code: "BAD_USER_INPUT"},
		{name: "array body", method: "POST", contentType: js, body: `[{"query":"{ __typename }"}]`, status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "trailing data", method: "POST", contentType: js, body: `{"query":"{ __typename }"} {}`, status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "number query", method: "POST", contentType: js, body: `{"query": 5}`, status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "array variables", method: "POST", contentType: js, body: `{"query":"{ __typename }","variables":[1]}`, status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "string extensions", method: "POST", contentType: js, body: `{"query":"{ __typename }","extensions":"x"}`, status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "no query", method: "POST", contentType: js, accept: gql, body: `{"qeury":"{ __typename }"}`, status: 400, media: gql, code: "BAD_USER_INPUT"},
		{name: "empty body", method: "POST", contentType: js, status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "no content type", method: "POST", body: `{"query":"{ __typename }"}`, status: 415, media: js, code: "BAD_USER_INPUT"},
		{name: "form content type", method: "POST", contentType: "application/x-www-form-urlencoded", body: `query=x`, status: 415, media: js, code: "BAD_USER_INPUT"},
		{name: "latin1", method: "POST", contentType: js + "; charset=latin1", body: `{"query":"{ __typename }"}`, status: 415, media: js, code: "BAD_USER_INPUT"},
		{name: "GET query", method: "GET", rawQuery: "?query=" + url.QueryEscape("{ __typename }"), status: 200, media: js, data: true},
		{name: "GET mutation", method: "GET", accept: gql, rawQuery: "?query=" + url.QueryEscape("mutation { createPost { id } }"), status: 405, media: gql, code: "BAD_USER_INPUT"},
		{name: "GET bad variables", method: "GET", rawQuery: "?query=" + url.QueryEscape("{ __typename }") + "&variables=" + url.QueryEscape("[1"), status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "GET no query", method: "GET", status: 400, media: js, code: "BAD_USER_INPUT"},
		{name: "subscription over POST", method: "POST", contentType: js, accept: gql, body: `{"query":"subscription { unreadChanged { unread { total } } }"}`, status: 400, media: gql, code: "BAD_USER_INPUT"},
		{name: "PUT", method: "PUT", contentType: js, body: `{"query":"{ __typename }"}`, status: 405, media: js, code: "BAD_USER_INPUT"},
		{name: "DELETE", method: "DELETE", status: 405, media: js, code: "BAD_USER_INPUT"},
		{name: "event stream", method: "POST", contentType: js, accept: "text/event-stream", body: `{"query":"{ __typename }"}`, status: 406, media: js, code: "BAD_USER_INPUT"},
		{name: "too large", method: "POST", contentType: js, body: `{"query":"{ __typename }","x":"` + strings.Repeat("a", 2<<20) + `"}`, status: 413, media: js, code: "BAD_USER_INPUT"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, media, body, raw, hdr := c.do(t, s.URL)
			if status != c.status || !strings.HasPrefix(media, c.media) {
				t.Fatalf("got %d %q, want %d %q: %.300s", status, media, c.status, c.media, raw)
			}
			if _, ok := body["data"]; ok != c.data {
				t.Errorf("data key present %v, want %v: %.300s", ok, c.data, raw)
			}
			if status == 405 && hdr.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
			var errs []struct {
				Message    string
				Extensions map[string]any
			}
			json.Unmarshal(body["errors"], &errs)
			if c.code == "" {
				if len(errs) != 0 {
					t.Fatalf("errors: %s", body["errors"])
				}
				return
			}
			if len(errs) == 0 || errs[0].Extensions["code"] != c.code {
				t.Fatalf("want code %s: %.300s", c.code, raw)
			}
			for _, e := range errs {
				if e.Extensions["code"] == nil {
					t.Errorf("error without extensions.code: %q", e.Message)
				}
				if goTypeRE.MatchString(e.Message) || (c.body != "" && len(c.body) > 10 && strings.Contains(e.Message, c.body)) {
					t.Errorf("message shows Go internals or echoes the body: %q", e.Message)
				}
			}
		})
	}
	// OPTIONS lists the methods.
	req, _ := http.NewRequest("OPTIONS", s.URL+"/query", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 204 || !strings.Contains(resp.Header.Get("Allow"), "POST") {
		t.Fatalf("OPTIONS: %d %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
}

// No error message, whatever the input, shows a Go type name or decoder
// phrasing: variables of every wrong shape for every scalar.
func TestErrorMessagesShowNoGoTypes(t *testing.T) {
	s := newTestServer(t)
	tok := "Bearer " + s.token(t, 2, false)
	queries := map[string]string{
		"ID":      `query($v: ID!) { post(id: $v) { id } }`,
		"Int":     `query($v: Int) { systemNotifications(first: $v) { id } }`,
		"IDlist":  `query($v: [ID!]!) { posts(ids: $v) { id } }`,
		"Boolean": `query($v: Boolean!) { __typename @include(if: $v) }`,
	}
	values := []string{`{"x":1}`, `[1,2]`, `1.5`, `true`, `"s"`, `99999999999999999999999`, `-1`, `[[1]]`, `[{"a":1}]`, `null`, `1e400`}
	for qn, q := range queries {
		for _, v := range values {
			body := `{"query":` + strconv.Quote(q) + `,"variables":{"v":` + v + `}}`
			r := s.post(t, tok, body)
			for _, e := range r.Errors {
				if goTypeRE.MatchString(e.Message) {
					t.Errorf("%s with %s: message %q", qn, v, e.Message)
				}
				if e.Extensions["code"] == nil {
					t.Errorf("%s with %s: no code on %q", qn, v, e.Message)
				}
			}
		}
	}
	// Literal arguments of the wrong kind, too.
	for _, q := range []string{
		`{ post(id: 1.5) { id } }`, `{ systemNotifications(first: 99999999999) { id } }`,
		`{ systemNotifications(first: "x") { id } }`, `{ posts(ids: {a: 1}) { id } }`,
	} {
		r := s.post(t, tok, `{"query":`+strconv.Quote(q)+`}`)
		for _, e := range r.Errors {
			if goTypeRE.MatchString(e.Message) {
				t.Errorf("%s: message %q", q, e.Message)
			}
		}
	}
}

// A standard client sees a request error as GraphQL errors: Apollo Client
// 4 through application/graphql-response+json (a 400 whose body it
// reads), a fetch asking for */* through a 200 (where gqlgen's transport
// answered 422, which Apollo Client 3 reports with no GraphQL errors).
func TestClientsSeeRequestErrors(t *testing.T) {
	s := newTestServer(t)
	out := clients.Run(t, "http-apollo-errors.mjs", 30*time.Second, "TALLY_URL="+s.URL+"/query")
	var r struct {
		Apollo struct {
			Accept   string
			Combined bool
			Message  string
			Codes    []string
		}
		Fetch struct {
			Status      int
			ContentType string
			HasData     bool
			Codes       []string
		}
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(r.Apollo.Accept, "application/graphql-response+json") || !r.Apollo.Combined ||
		len(r.Apollo.Codes) == 0 || r.Apollo.Codes[0] != "BAD_USER_INPUT" || !strings.Contains(r.Apollo.Message, "noSuchField") {
		t.Errorf("Apollo Client 4: %+v", r.Apollo)
	}
	if r.Fetch.Status != 200 || !strings.HasPrefix(r.Fetch.ContentType, "application/json") || r.Fetch.HasData ||
		len(r.Fetch.Codes) == 0 || r.Fetch.Codes[0] != "BAD_USER_INPUT" {
		t.Errorf("fetch with */*: %+v", r.Fetch)
	}
}
