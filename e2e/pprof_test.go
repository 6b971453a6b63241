package e2e

import (
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"
)

// -pprof serves the profiles on its own address only; without it there is
// no profiling endpoint at all.
func TestPprofOnItsOwnAddress(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real processes")
	}
	p := startTally(t, t.TempDir(), "-pprof", "127.0.0.1:0")
	var pprofURL string
	deadline := time.Now().Add(10 * time.Second)
	re := regexp.MustCompile(`pprof=(http://\S+)`)
	for pprofURL == "" {
		if m := re.FindStringSubmatch(p.log()); m != nil {
			pprofURL = m[1]
		} else if time.Now().After(deadline) {
			t.Fatalf("no pprof line:\n%s", p.log())
		}
		time.Sleep(10 * time.Millisecond)
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(pprofURL + "cmdline"); code != 200 || !strings.Contains(body, "-pprof") {
		t.Fatalf("pprof cmdline: %d %q", code, body)
	}
	if code, body := get(pprofURL + "goroutine?debug=1"); code != 200 || !strings.Contains(body, "goroutine profile") {
		t.Fatalf("pprof goroutines: %d %.200s", code, body)
	}
	if _, body := get(p.url + "/debug/pprof/cmdline"); strings.Contains(body, "-pprof") {
		t.Fatal("the API address serves pprof")
	}
	if _, body := get(p.url + "/debug/pprof/goroutine?debug=1"); strings.Contains(body, "goroutine profile") {
		t.Fatal("the API address serves pprof")
	}
	p2 := startTally(t, t.TempDir())
	time.Sleep(100 * time.Millisecond)
	if strings.Contains(p2.log(), "pprof") {
		t.Fatalf("pprof is on without -pprof:\n%s", p2.log())
	}
}
