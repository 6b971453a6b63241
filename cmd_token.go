package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/tally-dev/tally/engine"
)

// tokenCmd is `tally token`: it prints a bearer token for -user, signed
// with TALLY_JWT_SECRET or, in dev mode, with the secret the dev server
// on -data wrote.
func tokenCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token", stderr)
	user := fs.String("user", "", "user id (decimal)")
	admin := fs.Bool("admin", false, "grant role admin")
	ttl := fs.Duration("ttl", 0, "expiry (0 = no exp claim)")
	data := fs.String("data", "./data", "data directory of a dev server, whose dev-jwt-secret signs the token when TALLY_JWT_SECRET is unset")
	var idf identityFlags
	idf.register(fs, false)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	id, err := strconv.ParseUint(*user, 10, 64)
	if err != nil || id == 0 {
		return usageError{fmt.Errorf("-user must be a positive decimal user id")}
	}
	k, _, err := keys(*data, false, idf)
	if err != nil {
		return err
	}
	tok, err := k.Sign(engine.UserID(id), *admin, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
