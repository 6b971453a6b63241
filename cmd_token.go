package main

import (
	"fmt"
	"io"
	"strconv"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/web/auth"
)

// tokenCmd is `tally token`: it prints a bearer token for -user (with
// role admin or service when asked), signed with TALLY_JWT_SECRET or, in
// dev mode, with the secret the dev server on -data wrote.
func tokenCmd(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("token", stderr)
	user := fs.String("user", "", "user id (decimal)")
	admin := fs.Bool("admin", false, "grant role admin")
	service := fs.Bool("service", false, "grant role service: the app's backend acting for -user (it may write content under -content-writes service, delete any post or comment, and erase users)")
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
	if *admin && *service {
		return usageError{fmt.Errorf("-admin and -service are two roles: a token carries one")}
	}
	role := ""
	switch {
	case *admin:
		role = auth.RoleAdmin
	case *service:
		role = auth.RoleService
	}
	k, _, err := keys(*data, false, idf)
	if err != nil {
		return err
	}
	tok, err := k.SignRole(engine.UserID(id), role, *ttl)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
