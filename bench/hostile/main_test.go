package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/web/auth"
	"github.com/tally-dev/tally/web/hub"
	"github.com/tally-dev/tally/web/transport"
)

// The soak runs end to end against an in-process server with the
// default limits: every request-level attack is refused, the
// well-behaved client's reads all succeed, and the report has its
// figures. (Its figures are not judged here: they are the soak's output.)
func TestSoakAgainstInProcessServer(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a soak of a few seconds")
	}
	const secret = "soak-test-secret-0123456789"
	t.Setenv("TALLY_JWT_SECRET", secret)
	keys, err := auth.NewKeys([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	store, err := embedded.Open(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := hub.New(store)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/query", transport.NewHandler(transport.Config{
		Store: store, Hub: h, Keys: keys, RateLimit: 50, RateBurst: 100, CostRate: 20000, CostBurst: 50000,
	}))
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); h.Close(); store.Close() })

	var out bytes.Buffer
	err = run([]string{"-url", srv.URL, "-quiet", "1s", "-duration", "2s", "-cooldown", "500ms",
		"-attacks", "createpost,addmembers,messages,introspection,members", "-attackers", "2"}, &out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	report := out.String()
	t.Log(report)
	for _, want := range []string{
		"createpost", "TOO_MANY_MUTATIONS", "COMPLEXITY_LIMIT_EXCEEDED", "p99 under attack ÷ quiet", "RSS growth under attack",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q", want)
		}
	}
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "createpost" || f[0] == "addmembers" || f[0] == "messages" || f[0] == "introspection") && strings.Contains(line, "ANSWERED") {
			t.Errorf("an attack was answered: %s", line)
		}
		if len(f) > 0 && (f[0] == "quiet:" || f[0] == "attack:") && !strings.HasSuffix(line, "errors 0") {
			t.Errorf("the well-behaved client failed: %s", line)
		}
	}
}

func TestSoakRefusesOtherHostsAndBadFlags(t *testing.T) {
	t.Setenv("TALLY_JWT_SECRET", "x-secret-0123456789")
	for _, args := range [][]string{
		{"-url", "http://example.com:8080"},
		{"-url", "http://10.0.0.1:8080"},
		{"-url", "https://127.0.0.1:8080"},
		{"-duration", "31m"},
		{"-attacks", "createpost,nuke"},
		{"-attackers", "0"},
	} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}
