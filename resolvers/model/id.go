package model

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/99designs/gqlgen/graphql"

	"github.com/tally-dev/tally/engine"
)

// The ID scalar. Ids are 64-bit, and a snowflake id is far above 2^53,
// the largest integer a JavaScript number (an IEEE double) holds exactly:
// a client that keeps an id as a number has rounded it before sending,
// to a neighbouring id that may name another post. So an id may come as
// a string of any size, or as a JSON number (or an Int literal) only up to
// 2^53, where no rounding can have happened; a larger number is refused,
// telling the client to send ids as strings. Responses always write ids
// as strings.

// maxExactID is 2^53: every integer up to it is exactly a double.
const maxExactID = 1 << 53

// MarshalID writes an id as a JSON string.
func MarshalID(s string) graphql.Marshaler { return graphql.MarshalID(s) }

// UnmarshalID reads an ID input as gqlgen's graphql.UnmarshalID does,
// refusing numbers above 2^53.
func UnmarshalID(v any) (string, error) {
	switch n := v.(type) {
	case json.Number:
		if u, err := strconv.ParseUint(string(n), 10, 64); err == nil {
			if u > maxExactID {
				return "", roundedID(string(n))
			}
		} else if f, err := strconv.ParseFloat(string(n), 64); err == nil && math.Abs(f) > maxExactID {
			return "", roundedID(string(n))
		}
	case int64:
		if n > maxExactID {
			return "", roundedID(strconv.FormatInt(n, 10))
		}
	case int:
		if n > maxExactID {
			return "", roundedID(strconv.Itoa(n))
		}
	case float64:
		if math.Abs(n) > maxExactID {
			return "", roundedID(strconv.FormatFloat(n, 'f', -1, 64))
		}
	}
	return graphql.UnmarshalID(v)
}

// roundedIDError is an id refused as a number; errors.Is(err,
// engine.ErrInvalid) makes it BAD_USER_INPUT.
type roundedIDError struct{ msg string }

func (e *roundedIDError) Error() string        { return e.msg }
func (e *roundedIDError) Is(target error) bool { return target == engine.ErrInvalid }

func roundedID(n string) error {
	if len(n) > 40 {
		n = n[:40] + "…"
	}
	return &roundedIDError{fmt.Sprintf("id %s was sent as a number above 2^53, which a JavaScript client has already rounded (it may name another object): send ids as strings, e.g. \"%s\"", n, n)}
}
