package main

import (
	"flag"
	"fmt"
	"log/slog"
)

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
