package main

// The command line: the subcommands, their dispatch, and the flag sets
// every command makes alike (environment, usage text, logging flags).

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
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
	{"check", "-data DIR | -redis ADDRS", "recount every derived count from what it counts, print the drifts (-repair: fix them)"},
	{"version", "", "print the version, commit and Go version"},
	{"help", "", "this text"},
}

// run runs the command args name (serve when args start with a flag or
// are empty) and returns the process's exit code: 0, 1 when the command
// failed, 2 for a usage error.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(ctx, args, stdout, stderr)
	case "token":
		err = tokenCmd(args, stdout, stderr)
	case "import":
		err = importCmd(ctx, args, stdout, stderr)
	case "demo-seed":
		err = demoSeedCmd(ctx, args, stdout, stderr)
	case "backup":
		err = backupCmd(ctx, args, stdout, stderr)
	case "restore":
		err = restoreCmd(args, stdout, stderr)
	case "repair":
		err = repairCmd(args, stdout, stderr)
	case "check":
		err = checkCmd(ctx, args, stdout, stderr)
	case "version":
		printVersion(stdout)
		return 0
	case "help":
		fmt.Fprint(stdout, usageText())
		return 0
	default:
		fmt.Fprintf(stderr, "tally: unknown command %q\n\n%s", cmd, usageText())
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var es exitStatus
	if errors.As(err, &es) {
		fmt.Fprintf(stderr, "tally %s: %s\n", cmd, es.msg)
		return es.code
	}
	if err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "tally %s: %v\n", cmd, err)
			return 2
		}
		if loggingSet {
			slog.Error("tally "+cmd+" failed", "err", err)
		} else {
			fmt.Fprintf(stderr, "tally %s: %v\n", cmd, err)
		}
		return 1
	}
	return 0
}

// usageError is a command line the command refuses: exit code 2.
type usageError struct{ error }

// exitStatus is an outcome that is no failure yet not a success, whose
// report the command printed (tally check's drifts): exit with code.
type exitStatus struct {
	code int
	msg  string
}

func (e exitStatus) Error() string { return e.msg }

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

// parseFlags parses args, then fills every flag not given on the command
// line from TALLY_<NAME> in the environment.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		env := "TALLY_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(env); ok && !given[f.Name] && err == nil {
			if e := f.Value.Set(v); e != nil {
				err = usageError{fmt.Errorf("%s=%q: %v", env, v, e)}
			}
		}
	})
	if err != nil {
		return err
	}
	return setupLogging(fs)
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

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
