package engine

import "fmt"

// FormatError reports stored state — a data directory's files, a Redis
// keyspace — written in a format this build does not read. Tally has
// never been released, so no stored state exists that a build must carry
// forward: each build reads exactly the formats it writes, every stored
// format carries its version, and any other version is refused with this
// error at start rather than read by guesswork.
type FormatError struct {
	Store  string // what holds the state: "data directory /var/lib/tally", ...
	Format string // which format: "log record", "snapshot state", "Redis keyspace", ...
	Found  uint64 // the version the stored state carries (0: it carries none)
	Want   uint64 // the version this build reads and writes
	Fresh  string // where to start afresh: "an empty -data directory", ...
}

func (e *FormatError) Error() string {
	store := "the stored state"
	if e.Store != "" {
		store = e.Store
	}
	if e.Found > e.Want {
		return fmt.Sprintf("%s was written by a newer build of Tally (%s format %d); this build reads %s format %d: run the newer build",
			store, e.Format, e.Found, e.Format, e.Want)
	}
	return fmt.Sprintf("%s was written by an older development build of Tally (%s format %d); this build reads %s format %d. "+
		"No released Tally wrote that format, so no build converts it: run the build that wrote it, or start from %s",
		store, e.Format, e.Found, e.Format, e.Want, e.Fresh)
}
