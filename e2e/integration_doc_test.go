package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/transport"
)

// TestIntegrationDoc sends every request of docs/integration.md's "A
// sequence of calls", in order, to a server with -content-writes
// service, on each backend: a ```graphql block with the token its first
// line names ("# As the app backend, for user N": a service token for N;
// "# As user N": N's own), or a ```sh block's curl body (-d '…') with the
// service token its `tally token -user N -service` line makes. A ```json
// block after a request is what the answer must hold: its data, or its
// errors' codes.
func TestIntegrationDoc(t *testing.T) {
	eachLifecycleBackend(t, transport.Config{ContentWrites: resolvers.ContentWritesService}, integrationDocCase)
}

func integrationDocCase(t *testing.T, s *testServer) {
	text, err := os.ReadFile(filepath.Join(repoRoot, "docs", "integration.md"))
	if err != nil {
		t.Fatal(err)
	}
	steps := integrationSteps(t, string(text))
	if len(steps) < 10 {
		t.Fatalf("the sequence holds %d requests", len(steps))
	}
	for i, st := range steps {
		tok := s.roleToken(t, st.user, st.role)
		body, _ := json.Marshal(st.body)
		r := s.post(t, "Bearer "+tok, string(body))
		if st.want == nil {
			if len(r.Errors) > 0 {
				t.Fatalf("request %d (%s):\n%s\nerrors: %+v", i+1, st.as, st.body["query"], r.Errors)
			}
			continue
		}
		got := map[string]any{}
		if r.Data != nil {
			var data any
			json.Unmarshal(r.Data, &data)
			got["data"] = data
		}
		if len(r.Errors) > 0 {
			var errs []any
			for _, e := range r.Errors {
				errs = append(errs, map[string]any{"extensions": map[string]any{"code": e.Extensions["code"]}})
			}
			got["errors"] = errs
		}
		if !holds(got, st.want) {
			g, _ := json.Marshal(got)
			w, _ := json.Marshal(st.want)
			t.Fatalf("request %d (%s):\n%s\nanswered %s\nthe page says %s", i+1, st.as, st.body["query"], g, w)
		}
	}
}

// integrationStep is one request of the page's sequence.
type integrationStep struct {
	as   string // the block's "As …" line, for messages
	user uint64
	role string
	body map[string]any // the GraphQL request
	want map[string]any // what the answer holds; nil: no errors
}

func integrationSteps(t *testing.T, text string) []integrationStep {
	t.Helper()
	section := markdownSection(t, text, "## A sequence of calls")
	asLine := regexp.MustCompile(`^# As (the app backend, for user|user) (\d+)\n`)
	tokenLine := regexp.MustCompile(`tally token -user (\d+) -service`)
	curlBody := regexp.MustCompile(`(?s)-d '(.*?)'`)
	var steps []integrationStep
	for _, m := range regexp.MustCompile("(?s)```(graphql|sh|json)\n(.*?)```").FindAllStringSubmatch(section, -1) {
		lang, block := m[1], m[2]
		var st integrationStep
		switch lang {
		case "graphql":
			who := asLine.FindStringSubmatch(block)
			if who == nil {
				t.Fatalf("a graphql block does not start with \"# As the app backend, for user N\" or \"# As user N\":\n%s", block)
			}
			st.as = strings.TrimSpace(strings.TrimPrefix(who[0], "# "))
			st.user, _ = strconv.ParseUint(who[2], 10, 64)
			if who[1] != "user" {
				st.role = auth.RoleService
			}
			st.body = map[string]any{"query": block}
		case "sh":
			who, body := tokenLine.FindStringSubmatch(block), curlBody.FindStringSubmatch(block)
			if who == nil || body == nil {
				t.Fatalf("a sh block without `tally token -user N -service` and a curl -d body:\n%s", block)
			}
			st.as = "curl with " + who[0]
			st.user, _ = strconv.ParseUint(who[1], 10, 64)
			st.role = auth.RoleService
			if err := json.Unmarshal([]byte(body[1]), &st.body); err != nil {
				t.Fatalf("the curl body is not JSON: %v\n%s", err, body[1])
			}
		case "json":
			if len(steps) == 0 || steps[len(steps)-1].want != nil {
				t.Fatalf("a json block follows no request:\n%s", block)
			}
			if err := json.Unmarshal([]byte(block), &steps[len(steps)-1].want); err != nil {
				t.Fatalf("a json block is not JSON: %v\n%s", err, block)
			}
			continue
		}
		steps = append(steps, st)
	}
	return steps
}

// holds reports whether got holds everything want says: each key of an
// object with a value that holds, each element of a list in order.
func holds(got, want any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, present := g[k]
			if !present || !holds(gv, wv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return false
		}
		for i := range w {
			if !holds(g[i], w[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(got, want)
}
