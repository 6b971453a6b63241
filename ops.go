package main

// What makes the binary operable: one logger setup for the server and
// every subcommand, usage texts, the build's version, the pprof listener
// and the metrics of the engine's internals (log, snapshots, Redis).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// commands lists the subcommands, in the order `tally -h` shows them,
// with the one-line synopsis each one's -h repeats.
var commands = []struct{ name, args, synopsis string }{
	{"serve", "[flags]", "serve the GraphQL API (what `tally` with no command does)"},
	{"token", "-user ID [-admin] [-ttl D]", "print a signed bearer token"},
	{"import", "-data DIR FILE...", "bulk-load post counts (CSV or NDJSON, - for stdin)"},
	{"demo-seed", "-data DIR", "fill a data directory with a small demo world"},
	{"backup", "-data DIR -out FILE", "consistent backup of a data directory (the server may run)"},
	{"restore", "-in FILE -data NEWDIR", "make a data directory from a backup"},
	{"repair", "-data DIR", "after a failed start: set aside what is corrupt, say what is lost"},
	{"version", "", "print the version, commit and Go version"},
	{"help", "", "this text"},
}

// newFlagSet makes a command's flag set: errors and -h go to stderr, -h
// shows the command's synopsis and flags, and -log-format and -log-level
// are there for every command alike (parseFlags applies them).
func newFlagSet(cmd string, stderr io.Writer) *flag.FlagSet {
	name := "tally " + cmd
	if cmd == "serve" {
		name = "tally"
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("log-format", "text", "log format: text or json (one object per line)")
	fs.String("log-level", "info", "least level logged: debug (adds an access log line per request), info, warn or error")
	fs.Usage = func() {
		out := fs.Output()
		if cmd == "serve" {
			fmt.Fprint(out, usageText())
			fmt.Fprintf(out, "\nFlags of tally (serve):\n")
		} else {
			for _, c := range commands {
				if c.name == cmd {
					fmt.Fprintf(out, "Usage: tally %s %s\n\n%s.\n\nFlags:\n", c.name, c.args, capitalize(c.synopsis))
				}
			}
		}
		fs.PrintDefaults()
	}
	return fs
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func usageText() string {
	var b strings.Builder
	b.WriteString("tally — counts and badges for social apps, over GraphQL.\n\nUsage:\n")
	for _, c := range commands {
		left := "tally " + c.name + " " + c.args
		if c.name == "serve" {
			left = "tally [serve] [flags]"
		}
		fmt.Fprintf(&b, "  %-40s %s\n", left, c.synopsis)
	}
	b.WriteString(`
Run tally COMMAND -h for a command's flags. Every command takes -log-format
(text or json) and -log-level. Every flag can also be set from the
environment: -addr as TALLY_ADDR, -fsync-window as TALLY_FSYNC_WINDOW, and so
on. Flags win over the environment. TALLY_JWT_SECRET (at least 16 bytes)
signs tokens; when it is unset the server makes a random secret for the run
and logs ready-to-paste tokens.
`)
	return b.String()
}

// setupLogging makes slog's default logger write to w in the format and
// from the level of fs's -log-format and -log-level. Every command goes
// through it (from parseFlags), so the server and the subcommands log
// alike.
func setupLogging(fs *flag.FlagSet) error {
	format, level := fs.Lookup("log-format"), fs.Lookup("log-level")
	if format == nil || level == nil {
		return nil
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level.Value.String())); err != nil {
		return usageError{fmt.Errorf("-log-level must be debug, info, warn or error, not %q", level.Value.String())}
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var h slog.Handler
	switch format.Value.String() {
	case "text":
		h = slog.NewTextHandler(fs.Output(), opts)
	case "json":
		h = slog.NewJSONHandler(fs.Output(), opts)
	default:
		return usageError{fmt.Errorf("-log-format must be text or json, not %q", format.Value.String())}
	}
	slog.SetDefault(slog.New(h))
	loggingSet = true
	return nil
}

// loggingSet is whether a command has set up logging, so that run reports
// the command's failure through it rather than as plain text.
var loggingSet bool

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

// startPprof serves net/http/pprof on its own listener, never on the API's
// address: profiles reveal internals and cost CPU, so only an operator who
// asked for them (and can reach that address) gets them.
func startPprof(addr string) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("-pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			slog.Warn("pprof server stopped", "err", err)
		}
	}()
	slog.Info("pprof serving", "pprof", "http://"+ln.Addr().String()+"/debug/pprof/")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	}, nil
}
