package deploy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/goccy/go-yaml"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/tally-dev/tally/engine/redisstore/redistest"
)

// A query of the dashboard or an alert rule.
type promQuery struct {
	where string // "dashboard panel \"...\"" or "alert ..."
	expr  string
}

// dashboardQueries returns every PromQL expression of the dashboard: its
// panels' targets and its variables' label_values() selectors.
func dashboardQueries(t *testing.T) []promQuery {
	t.Helper()
	b, err := os.ReadFile("grafana/tally.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			ID      int    `json:"id"`
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct{ X, Y, W, H int }
			Targets []struct {
				RefID string `json:"refId"`
				Expr  string `json:"expr"`
			} `json:"targets"`
			Datasource struct{ UID string } `json:"datasource"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("grafana/tally.json: %v", err)
	}
	var out []promQuery
	ids := map[int]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d is used twice", p.ID)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("panel %q: gridPos %+v is outside Grafana's 24 columns", p.Title, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, want the dashboard's ${datasource} variable", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			out = append(out, promQuery{fmt.Sprintf("dashboard panel %q (%s)", p.Title, tg.RefID), tg.Expr})
		}
	}
	labelValues := regexp.MustCompile(`^label_values\((.+),\s*\w+\)$`)
	for _, v := range dash.Templating.List {
		if v.Type != "query" {
			continue
		}
		m := labelValues.FindStringSubmatch(v.Definition)
		if m == nil {
			t.Errorf("variable %s: %q is not label_values(selector, label)", v.Name, v.Definition)
			continue
		}
		out = append(out, promQuery{"dashboard variable " + v.Name, m[1]})
	}
	return out
}

// ruleQueries returns the expression of every rule in prometheus/alerts.yml.
func ruleQueries(t *testing.T) []promQuery {
	t.Helper()
	b, err := os.ReadFile("prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert  string `yaml:"alert"`
				Record string `yaml:"record"`
				Expr   string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatalf("prometheus/alerts.yml: %v", err)
	}
	var out []promQuery
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out = append(out, promQuery{"alert " + r.Alert + r.Record, r.Expr})
		}
	}
	if len(out) == 0 {
		t.Fatal("prometheus/alerts.yml holds no rules")
	}
	return out
}

// grafanaRanges are the dashboard's range variables; a duration stands in
// for each so that the query parses.
var grafanaRanges = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "$__range", "1h")

// Labels every series has once scraped, set by Prometheus, not /metrics.
var targetLabels = []string{"job", "instance"}

// Series Prometheus makes itself for each target.
var prometheusSeries = map[string]bool{"up": true}

// exported is what the live servers' /metrics exposed: the label names of
// each name a query may use, histogram and summary series included.
type exported map[string]map[string]bool

func (e exported) add(families map[string]*dto.MetricFamily) {
	for name, f := range families {
		names := map[string]bool{}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				names[l.GetName()] = true
			}
		}
		series := []string{name}
		switch f.GetType() {
		case dto.MetricType_HISTOGRAM:
			series = []string{name + "_bucket", name + "_sum", name + "_count"}
		case dto.MetricType_SUMMARY:
			series = []string{name, name + "_sum", name + "_count"}
		}
		for _, s := range series {
			if e[s] == nil {
				e[s] = map[string]bool{}
			}
			for n := range names {
				e[s][n] = true
			}
		}
		if f.GetType() == dto.MetricType_HISTOGRAM {
			e[name+"_bucket"]["le"] = true
		}
		if f.GetType() == dto.MetricType_SUMMARY {
			e[name]["quantile"] = true
		}
	}
}

// has reports whether series name carries label (or Prometheus adds it).
func (e exported) has(name, label string) bool {
	return slices.Contains(targetLabels, label) || e[name][label]
}

// check parses q with the PromQL parser and returns what is wrong with it
// against e: a metric /metrics does not expose, a label its series do not
// carry, or grouping by a label none of the aggregated series carry.
func (e exported) check(q promQuery) []string {
	expr, err := parser.ParseExpr(grafanaRanges.Replace(q.expr))
	if err != nil {
		return []string{fmt.Sprintf("%s: does not parse: %v\n\t%s", q.where, err, q.expr)}
	}
	var problems []string
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			name := selectorName(n)
			switch {
			case name == "":
				problems = append(problems, fmt.Sprintf("%s: a selector without a metric name: %s", q.where, n))
			case prometheusSeries[name]:
			case e[name] == nil:
				problems = append(problems, fmt.Sprintf("%s: %s is not exported by /metrics", q.where, name))
			default:
				for _, m := range n.LabelMatchers {
					if m.Name != labels.MetricName && !e.has(name, m.Name) {
						problems = append(problems, fmt.Sprintf("%s: %s has no label %q", q.where, name, m.Name))
					}
				}
			}
		case *parser.AggregateExpr:
			var names []string
			parser.Inspect(n.Expr, func(inner parser.Node, _ []parser.Node) error {
				if vs, ok := inner.(*parser.VectorSelector); ok {
					names = append(names, selectorName(vs))
				}
				return nil
			})
			for _, label := range n.Grouping {
				if !slices.ContainsFunc(names, func(name string) bool { return prometheusSeries[name] || e.has(name, label) }) {
					problems = append(problems, fmt.Sprintf("%s: groups by %q, which none of %v carry", q.where, label, names))
				}
			}
		}
		return nil
	})
	return problems
}

func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == labels.MetricName && m.Type == labels.MatchEqual {
			return m.Value
		}
	}
	return ""
}

// TestDashboardAndAlertsNameExportedMetrics runs the server on the
// embedded engine and on Redis, drives traffic of every kind through it
// (and, on Redis, takes Redis away), and checks every query of the
// dashboard and of the alert rules against what /metrics exposed: each
// metric exists, each label matcher names a label its series carry, each
// grouping label is carried by what is aggregated.
func TestDashboardAndAlertsNameExportedMetrics(t *testing.T) {
	queries := append(dashboardQueries(t), ruleQueries(t)...)
	seen := exported{}

	t.Run("embedded", func(t *testing.T) {
		s := startServer(t, "-data", t.TempDir(), "-snapshot-interval", "100ms", "-rate-limit", "0.01", "-rate-burst", "3")
		tokens := map[int]string{1: s.token(1, false), 2: s.token(2, false), 3: s.token(3, false)}
		traffic(t, s.url, tokens)
		// User 3 spends the burst of 3; the fourth mutation is refused.
		for range 3 {
			mustQuery(t, s.url, tokens[3], `mutation { createPost { id } }`, nil)
		}
		if code := errorCode(query(t, s.url, tokens[3], `mutation { createPost { id } }`, nil)); code != "RATE_LIMITED" {
			t.Fatalf("the fourth mutation of a burst of 3 answered %q, want RATE_LIMITED", code)
		}
		families := waitFor(t, s.url, "a snapshot of every record", func(f map[string]*dto.MetricFamily) bool {
			snaps, _ := value(f, "tally_snapshot_seconds", nil)
			behind, _ := value(f, "tally_wal_records_since_snapshot", nil)
			return snaps >= 1 && behind == 0
		})
		for _, c := range []struct {
			name   string
			labels map[string]string
			want   func(float64) bool
			what   string
		}{
			{"tally_ready", nil, func(v float64) bool { return v == 1 }, "1"},
			{"tally_rate_limited_total", map[string]string{"limit": "mutations"}, func(v float64) bool { return v == 1 }, "1"},
			{"tally_snapshot_timestamp_seconds", nil, func(v float64) bool { return v > 1.7e9 }, "a time after 2023"},
			{"tally_snapshot_failures_total", nil, func(v float64) bool { return v == 0 }, "0"},
			{"tally_graphql_subscription_events_total", map[string]string{"name": "Badges", "outcome": "ok"}, func(v float64) bool { return v >= 2 }, "2 or more"},
			{"tally_websocket_closes_total", map[string]string{"code": "1000"}, func(v float64) bool { return v == 1 }, "1"},
		} {
			if v, ok := value(families, c.name, c.labels); !ok || !c.want(v) {
				t.Errorf("%s%v = %v (exported %v), want %s", c.name, c.labels, v, ok, c.what)
			}
		}
		seen.add(families)
	})

	t.Run("redis", func(t *testing.T) {
		redis := redistest.StartSingleNode(t)
		s := startServer(t, "-redis", redis.Addr, "-redis-start-wait", "10s")
		tokens := map[int]string{1: s.token(1, false), 2: s.token(2, false)}
		traffic(t, s.url, tokens)
		seen.add(scrape(t, s.url))

		// Redis goes away: requests fail with INTERNAL, and /metrics
		// says so.
		redis.Kill()
		if code := errorCode(query(t, s.url, tokens[2], `{ viewer { unread { likes } } }`, nil)); code != "UNAVAILABLE" {
			t.Fatalf("with Redis gone a query answered %q, want UNAVAILABLE", code)
		}
		if code, _ := get(t, s.url+"/readyz"); code != 503 {
			t.Fatalf("/readyz with Redis gone: %d, want 503", code)
		}
		families := scrape(t, s.url)
		if v, _ := value(families, "tally_ready", nil); v != 0 {
			t.Errorf("tally_ready = %v with Redis gone, want 0", v)
		}
		if v, _ := value(families, "tally_redis_errors_total", nil); v < 1 {
			t.Errorf("tally_redis_errors_total = %v with Redis gone, want failures counted", v)
		}
		if v, _ := value(families, "tally_graphql_responses_total", map[string]string{"outcome": "unavailable"}); v < 1 {
			t.Errorf("no GraphQL response counted with outcome=unavailable with Redis gone")
		}
		if _, ok := families["tally_redis_intents_recovered_total"]; !ok {
			t.Errorf("tally_redis_intents_recovered_total is not exported on Redis")
		}
		seen.add(families)
	})
	if t.Failed() {
		return
	}

	var problems []string
	for _, q := range queries {
		problems = append(problems, seen.check(q)...)
	}
	for _, p := range problems {
		t.Error(p)
	}

	// What the assets leave out, for whoever extends them.
	used := map[string]bool{}
	for _, q := range queries {
		expr, err := parser.ParseExpr(grafanaRanges.Replace(q.expr))
		if err != nil {
			continue
		}
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			if vs, ok := node.(*parser.VectorSelector); ok {
				used[selectorName(vs)] = true
			}
			return nil
		})
	}
	// A histogram counts as used when any of its series is.
	family := func(name string) string {
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && seen[base+"_bucket"] != nil {
				return base
			}
		}
		return name
	}
	usedFamilies := map[string]bool{}
	for name := range used {
		usedFamilies[family(name)] = true
	}
	var unused []string
	for name := range seen {
		if f := family(name); strings.HasPrefix(f, "tally_") && !usedFamilies[f] && !slices.Contains(unused, f) {
			unused = append(unused, f)
		}
	}
	sort.Strings(unused)
	t.Logf("%d queries checked; tally_ series no query uses: %v", len(queries), unused)
}

// The checker itself: the mistakes it exists to catch are caught.
func TestMetricCheckerCatchesMistakes(t *testing.T) {
	seen := exported{
		"tally_http_responses_total":           {"route": true, "code": true},
		"tally_wal_fsync_seconds_bucket":       {"le": true},
		"tally_wal_fsync_seconds_sum":          {},
		"tally_wal_fsync_seconds_count":        {},
		"tally_graphql_responses_total":        {"type": true, "name": true, "outcome": true},
		"tally_graphql_response_seconds_count": {"type": true, "name": true},
	}
	for _, c := range []struct {
		expr string
		want string // a part of the one problem expected; "" for none
	}{
		{`sum by (route) (rate(tally_http_responses_total{job="$job",code=~"5.."}[$__rate_interval]))`, ""},
		{`histogram_quantile(0.99, sum by (le, instance) (rate(tally_wal_fsync_seconds_bucket[5m])))`, ""},
		{`up{job="tally"} == 0`, ""},
		{`rate(tally_http_response_total[5m])`, "tally_http_response_total is not exported"},
		{`rate(tally_wal_fsync_seconds[5m])`, "tally_wal_fsync_seconds is not exported"},
		{`rate(tally_http_responses_total{status="500"}[5m])`, `has no label "status"`},
		{`sum by (outcome) (rate(tally_http_responses_total[5m]))`, `groups by "outcome"`},
		{`{__name__="tally_nope"}`, "tally_nope is not exported"},
		{`{job="tally"}`, "without a metric name"},
		{`rate(tally_http_responses_total[5m]`, "does not parse"},
	} {
		problems := seen.check(promQuery{"test", c.expr})
		switch {
		case c.want == "" && len(problems) > 0:
			t.Errorf("%s: unexpected %v", c.expr, problems)
		case c.want != "" && (len(problems) != 1 || !strings.Contains(problems[0], c.want)):
			t.Errorf("%s: got %v, want one problem with %q", c.expr, problems, c.want)
		}
	}
}
