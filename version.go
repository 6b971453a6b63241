package main

// What the binary knows of its build, for `tally version`, -version and
// the tally_build_info metric.

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// buildInfo is what the binary knows of its build.
type buildInfo struct {
	version, commit, goVersion string
	modified                   bool
	time                       string
}

// ldVersion and ldCommit, when set with -ldflags "-X main.ldVersion=v1.2.3
// -X main.ldCommit=abc123", win over what the Go toolchain stamped: for
// builds from a tarball or with -buildvcs=false, which carry no VCS data.
var ldVersion, ldCommit string

var readBuildInfo = sync.OnceValue(func() buildInfo {
	b := buildInfo{version: "(devel)", commit: "unknown", goVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v := bi.Main.Version; v != "" {
			b.version = v
		}
		if bi.GoVersion != "" {
			b.goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				b.commit = s.Value
			case "vcs.modified":
				b.modified = s.Value == "true"
			case "vcs.time":
				b.time = s.Value
			}
		}
	}
	if ldVersion != "" {
		b.version = ldVersion
	}
	if ldCommit != "" {
		b.commit, b.modified, b.time = ldCommit, false, ""
	}
	return b
})

func printVersion(w io.Writer) {
	b := readBuildInfo()
	commit := b.commit
	if b.modified {
		commit += " (modified)"
	}
	if b.time != "" {
		commit += " from " + b.time
	}
	fmt.Fprintf(w, "tally %s\ncommit %s\n%s %s/%s\n", b.version, commit, b.goVersion, runtime.GOOS, runtime.GOARCH)
}

// registerBuildInfo adds tally_build_info, always 1, whose labels say
// which build is running (dashboards join on it; alerts catch a fleet
// running mixed versions).
func registerBuildInfo(reg prometheus.Registerer) {
	b := readBuildInfo()
	commit := b.commit
	if b.modified {
		commit += "-modified"
	}
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "tally_build_info",
		Help:        "The running build: version, VCS commit and Go version (always 1).",
		ConstLabels: prometheus.Labels{"version": b.version, "commit": commit, "goversion": b.goVersion},
	})
	g.Set(1)
	reg.MustRegister(g)
}
