package transport

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/99designs/gqlgen/graphql"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/vektah/gqlparser/v2"

	"github.com/tally-dev/tally/graph"
	"github.com/tally-dev/tally/resolvers"
)

// price runs costLimit on query as gqlgen would after validation and
// returns the price it computed (or the error code it refused with).
func price(t *testing.T, c *costLimit, query string, vars map[string]any) (int, string, *graphql.OperationContext) {
	t.Helper()
	gc := resolvers.GraphConfig(nil, nil, resolvers.Policy{})
	setComplexity(&gc, 6)
	if err := c.Validate(graph.NewExecutableSchema(gc)); err != nil {
		t.Fatal(err)
	}
	doc, errs := gqlparser.LoadQuery(c.es.Schema(), query)
	if errs != nil {
		t.Fatalf("invalid test query: %v", errs)
	}
	opCtx := &graphql.OperationContext{RawQuery: query, Doc: doc, Operation: doc.Operations[0], Variables: vars}
	if gerr := c.MutateOperationContext(context.Background(), opCtx); gerr != nil {
		reason, _ := gerr.Extensions["reason"].(string)
		return 0, reason, opCtx
	}
	return extension.GetComplexityStats(graphql.WithOperationContext(context.Background(), opCtx)).Complexity, "", opCtx
}

func TestCostCountsListArgumentsAcrossAliases(t *testing.T) {
	c := &costLimit{limit: 1 << 30, introspection: true}
	one, _, _ := price(t, c, `mutation { addGroupMembers(groupId: "1", userIds: ["2","3","4"]) { id } }`, nil)
	if one != 1+3+1 {
		t.Fatalf("addGroupMembers of 3 ids costs %d, want 5 (field, ids, id)", one)
	}
	ids := `["` + strings.Repeat(`2","`, 99) + `2"]`
	q := "mutation($u: [ID!]!) {"
	for i := range 200 {
		q += fmt.Sprintf(" a%d", i) + `: addGroupMembers(groupId: "1", userIds: $u) { id }`
	}
	q += " }"
	many, _, _ := price(t, c, q, map[string]any{"u": toAny(strings.Split(strings.Trim(ids, `[]"`), `","`))})
	if many != 200*(1+100+1) {
		t.Fatalf("200 aliased addGroupMembers of 100 ids cost %d, want %d", many, 200*102)
	}
	// Variables resolve: @skip(if: true) costs nothing.
	skipped, _, _ := price(t, c, `query($s: Boolean!) { posts(ids: ["1","2"]) @skip(if: $s) { id } viewer { id } }`, map[string]any{"s": true})
	if skipped != 2 {
		t.Fatalf("skipped posts + viewer { id } cost %d, want 2", skipped)
	}
	// A page of posts: each id looked up, the selection times the page.
	page, _, _ := price(t, c, `{ posts(ids: ["1","2","3"]) { id counts { likes } } }`, nil)
	if page != 1+3*(1+2)+3 {
		t.Fatalf("posts(3 ids) costs %d, want %d", page, 1+3*3+3)
	}
	// Reactions: one element per kind of the deployment (six here).
	reactions, _, _ := price(t, c, `{ posts(ids: ["1","2","3"]) { reactions { kind count } viewerReaction } }`, nil)
	if want := 1 + 3*((1+6*2)+1) + 3; reactions != want {
		t.Fatalf("posts(3 ids) with reactions costs %d, want %d", reactions, want)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func TestCostPricesIntrospectionByWhatItReturns(t *testing.T) {
	full, err := os.ReadFile("testdata/introspection-query.graphql")
	if err != nil {
		t.Fatal(err)
	}
	c := &costLimit{limit: 1 << 30, introspection: true}
	whole, _, _ := price(t, c, string(full), nil)
	t.Logf("graphql-js's full introspection query (GraphiQL's) costs %d", whole)
	if whole < 1000 {
		t.Fatalf("the whole schema's introspection costs %d: introspection is not priced", whole)
	}
	if whole > 5000 {
		t.Fatalf("the whole schema's introspection costs %d, over the default limit of 5000: GraphiQL could not load the schema", whole)
	}
	// One type's name costs 2 (__type and name); __typename 1.
	if p, _, _ := price(t, c, `{ __type(name: "Post") { name } __typename }`, nil); p != 3 {
		t.Fatalf("__type { name } + __typename cost %d, want 3", p)
	}
	// Every type listed costs its selection: types { name } = 1 + 2 per type.
	types, _, _ := price(t, c, `{ __schema { types { name } } }`, nil)
	if n := len(c.es.Schema().Types); types != 1+1+n {
		t.Fatalf("__schema { types { name } } costs %d, want %d for %d types", types, 2+n, n)
	}

	// Aliased copies add up, and the walk stops at the limit: pricing
	// 1,400 of them is refused without walking them all.
	q := `fragment F on __Schema { types { fields { name type { name } } } } query {`
	for i := range 1400 {
		q += fmt.Sprintf(" s%d", i) + `: __schema { ...F }`
	}
	q += " }"
	limited := &costLimit{limit: 5000, introspection: true}
	if _, reason, _ := price(t, limited, q, nil); reason != "COMPLEXITY_LIMIT_EXCEEDED" {
		t.Fatalf("1,400 aliased __schema: refused with %q, want COMPLEXITY_LIMIT_EXCEEDED", reason)
	}
}

func TestCostRefusesIntrospectionWhenOff(t *testing.T) {
	c := &costLimit{limit: 5000}
	for _, q := range []string{`{ __schema { types { name } } }`, `{ __type(name: "Post") { name } }`} {
		if _, reason, _ := price(t, c, q, nil); reason != "INTROSPECTION_DISABLED" {
			t.Fatalf("%s with introspection off: reason %q", q, reason)
		}
	}
	if p, reason, _ := price(t, c, `{ __typename viewer { __typename id } }`, nil); reason != "" || p != 4 {
		t.Fatalf("__typename with introspection off: price %d, refused %q", p, reason)
	}
}

func TestCountMutationFields(t *testing.T) {
	c := &costLimit{limit: 1 << 30, maxMutations: 3, introspection: true}
	for _, tc := range []struct {
		q    string
		vars map[string]any
		want int
	}{
		{`mutation { a: createPost { id } b: createPost { id } }`, nil, 2},
		// The same response name twice is one execution.
		{`mutation { a: clickRedDot { id } a: clickRedDot { redDot } }`, nil, 1},
		{`mutation { ...M ... on Mutation { c: createPost { id } } __typename } fragment M on Mutation { a: createPost { id } b: createPost { id } }`, nil, 3},
		{`mutation($no: Boolean!) { a: createPost { id } b: createPost @include(if: $no) { id } c: createPost @skip(if: $no) { id } }`, map[string]any{"no": false}, 2},
	} {
		_, reason, opCtx := price(t, c, tc.q, tc.vars)
		if reason != "" {
			t.Fatalf("%s refused: %s", tc.q, reason)
		}
		if n, _ := opCtx.Stats.GetExtension(mutationFieldsKey).(int); n != tc.want {
			t.Fatalf("%s: %d mutation fields, want %d", tc.q, n, tc.want)
		}
	}
	if _, reason, _ := price(t, c, `mutation { a: createPost { id } b: createPost { id } c: createPost { id } d: createPost { id } }`, nil); reason != "TOO_MANY_MUTATIONS" {
		t.Fatalf("4 mutation fields with a cap of 3: refused with %q", reason)
	}
}
