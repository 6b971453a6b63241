package e2e

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/tally-dev/tally/engine"
)

// schemaIntrospection asks the running server for every description a
// client (GraphiQL, a code generator) can see.
const schemaIntrospection = `query Describe {
  __schema {
    types {
      kind name description
      fields(includeDeprecated: true) {
        name description
        args { name description }
      }
      inputFields { name description }
      enumValues(includeDeprecated: true) { name description }
    }
    directives { name description args { name description } }
  }
}`

type introspectedSchema struct {
	Schema struct {
		Types []struct {
			Kind, Name, Description string
			Fields                  []struct {
				Name, Description string
				Args              []struct{ Name, Description string }
			}
			InputFields []struct{ Name, Description string }
			EnumValues  []struct{ Name, Description string }
		}
		Directives []struct {
			Name, Description string
			Args              []struct{ Name, Description string }
		}
	} `json:"__schema"`
}

// builtIn are the types every GraphQL schema has; their descriptions are
// the spec's business.
func builtIn(name string) bool {
	switch name {
	case "String", "Int", "Float", "Boolean", "ID":
		return true
	}
	return strings.HasPrefix(name, "__")
}

// Every type, field, argument and enum value of Tally's schema carries a
// description, as the running server reports it through introspection.
func TestSchemaDescribesEverything(t *testing.T) {
	s := newTestServer(t)
	res := s.do(t, 0, schemaIntrospection, nil)
	if len(res.Errors) > 0 {
		t.Fatalf("introspection: %+v", res.Errors)
	}
	var got introspectedSchema
	if err := json.Unmarshal(res.Data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Schema.Types) < 15 {
		t.Fatalf("introspection returned %d types", len(got.Schema.Types))
	}
	var missing, wrapped []string
	need := func(what, desc string) {
		if strings.TrimSpace(desc) == "" {
			missing = append(missing, what)
		}
		// GraphiQL renders a description as Markdown with every newline a
		// line break: paragraphs go on one line each.
		if strings.Contains(strings.ReplaceAll(desc, "\n\n", ""), "\n") {
			wrapped = append(wrapped, what)
		}
	}
	checked := 0
	for _, ty := range got.Schema.Types {
		if builtIn(ty.Name) {
			continue
		}
		need(ty.Kind+" "+ty.Name, ty.Description)
		for _, f := range ty.Fields {
			need(ty.Name+"."+f.Name, f.Description)
			for _, a := range f.Args {
				need(ty.Name+"."+f.Name+"("+a.Name+")", a.Description)
				checked++
			}
			checked++
		}
		for _, f := range ty.InputFields {
			need(ty.Name+"."+f.Name, f.Description)
			checked++
		}
		for _, v := range ty.EnumValues {
			need(ty.Name+"."+v.Name, v.Description)
			checked++
		}
		checked++
	}
	for _, d := range got.Schema.Directives {
		switch d.Name {
		case "skip", "include", "deprecated", "specifiedBy", "oneOf", "defer":
			continue
		}
		need("@"+d.Name, d.Description)
		for _, a := range d.Args {
			need("@"+d.Name+"("+a.Name+")", a.Description)
		}
	}
	if len(wrapped) > 0 {
		t.Errorf("hard-wrapped descriptions (GraphiQL shows each line break; keep a paragraph on one line):\n  %s", strings.Join(wrapped, "\n  "))
	}
	if len(missing) > 0 {
		t.Errorf("%d of %d schema elements have no description:\n  %s", len(missing), checked, strings.Join(missing, "\n  "))
	}
}

// The descriptions carry the contract's rules where clients look for them.
func TestSchemaDescriptionsCarryTheRules(t *testing.T) {
	s := newTestServer(t)
	res := s.do(t, 0, schemaIntrospection, nil)
	var got introspectedSchema
	if err := json.Unmarshal(res.Data, &got); err != nil || len(res.Errors) > 0 {
		t.Fatalf("introspection: %v %+v", err, res.Errors)
	}
	desc := map[string]string{}
	for _, ty := range got.Schema.Types {
		for _, f := range ty.Fields {
			desc[ty.Name+"."+f.Name] = f.Description
			for _, a := range f.Args {
				desc[ty.Name+"."+f.Name+"("+a.Name+")"] = a.Description
			}
		}
	}
	for field, want := range map[string][]string{
		"Query.posts":                         {"at most 100", "BAD_USER_INPUT"},
		"Query.viewer":                        {"UNAUTHENTICATED"},
		"Query.message":                       {"FORBIDDEN", "members"},
		"Mutation.likePost":                   {"second like", "changes nothing"},
		"Mutation.unlikePost":                 {"changes nothing"},
		"Mutation.recordViews(postIds)":       {"at most 100"},
		"Mutation.publishSystemNotification":  {"Admin only", "FORBIDDEN"},
		"Mutation.pushRedDot":                 {"Admin only"},
		"Mutation.addGroupMembers":            {"members only", "FORBIDDEN"},
		"Mutation.sendMessage(text)":          {"4096 bytes"},
		"Message.readReceipts":                {"sender only", "FORBIDDEN"},
		"Subscription.readReceiptsChanged":    {"sender only"},
		"PostCounts.id":                       {"normalising cache"},
		"Mutation.createPost(idempotencyKey)": {"retry"},
		"Mutation.createPost":                 {"-content-writes service", "FORBIDDEN"},
		"Mutation.repostPost":                 {"-content-writes service", "FORBIDDEN"},
		"Mutation.commentOnPost":              {"-content-writes service", "NOT_FOUND"},
		"Mutation.commentOnPost(commentId)":   {"snowflake", "at most once", "BAD_USER_INPUT"},
		"Mutation.deleteComment":              {"once", "repeat changes nothing", "FORBIDDEN", "NOT_FOUND", "never counted", "-content-writes service"},
		"Mutation.deletePost":                 {"null", "postCount", "loses 1 repost", "below zero", "repeat changes nothing", "FORBIDDEN", "NOT_FOUND", "-content-writes service"},
		"Mutation.eraseUser":                  {"Admin or service", "FORBIDDEN", "both directions", "receipts already recorded", "repeat changes nothing", "snapshot"},
	} {
		d, ok := desc[field]
		if !ok {
			t.Errorf("%s is not in the schema", field)
			continue
		}
		for _, w := range want {
			if !strings.Contains(strings.ToLower(d), strings.ToLower(w)) {
				t.Errorf("%s's description lacks %q: %q", field, w, d)
			}
		}
	}
}

// The schema's defaults of every `first` are the engine's page sizes,
// which the resolvers and the cost pricing use when first is null, and
// API.md's; a list paged by first that has no entry here needs one.
func TestSchemaPageDefaultsAreTheEngines(t *testing.T) {
	s := newTestServer(t)
	m := s.q(t, 0, `{ __schema { types { name fields { name args { name defaultValue } } } } }`, nil)
	want := map[string]int{
		"Query.systemNotifications": engine.DefaultNotificationPageSize,
		"Group.members":             engine.DefaultMemberPageSize,
		"ReadReceipts.readers":      engine.DefaultMemberPageSize,
		"ReadReceipts.unreaders":    engine.DefaultMemberPageSize,
	}
	if engine.DefaultNotificationPageSize != 20 || engine.DefaultMemberPageSize != 50 {
		t.Errorf("page sizes %d and %d; API.md fixes systemNotifications(first: Int = 20) and readers(first: Int = 50)",
			engine.DefaultNotificationPageSize, engine.DefaultMemberPageSize)
	}
	seen := map[string]bool{}
	for _, typ := range get(m, "__schema", "types").([]any) {
		fields, _ := get(typ, "fields").([]any)
		for _, f := range fields {
			for _, a := range get(f, "args").([]any) {
				if str(a, "name") != "first" {
					continue
				}
				name := str(typ, "name") + "." + str(f, "name")
				def, ok := want[name]
				if !ok {
					t.Errorf("%s is paged by first, and no engine page size is its default", name)
					continue
				}
				seen[name] = true
				if got := str(a, "defaultValue"); got != strconv.Itoa(def) {
					t.Errorf("%s(first) defaults to %q in the schema; the engine's page size is %d", name, got, def)
				}
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("the schema has no %s(first)", name)
		}
	}
}
