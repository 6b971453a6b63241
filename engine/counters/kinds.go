package counters

import (
	"errors"
	"fmt"
	"strings"
)

// Reaction kinds (表态): a deployment lists the kinds its users may react
// with (like, love, haha…), one reaction per (user, post). Like is always
// a kind, and its count is the post's likes: the other kinds are counts a
// post carries only when it has them.
//
// A kind is stored by its id, a small integer given once in a kinds table
// kept with the data, never by its position in the configuration: adding
// a kind to the configuration gives it the lowest free id, reordering the
// configuration changes nothing stored, and removing a kind frees its id
// only once no reaction of it is counted (Reconcile).

// Kind is a reaction kind by its id in a kinds table: 0 is no reaction,
// 1 is like, 2 to MaxKinds the others.
type Kind uint8

const (
	NoKind Kind = 0
	Like   Kind = 1
	// MaxKinds bounds the kinds of a deployment, like included: the
	// reactions of a post are a fixed array (Reactions), so that a page
	// read holds them without allocating, and a kind fits 4 bits of a
	// stored pair. Sixteen is twice what the largest products offer
	// (Facebook's seven, LinkedIn's six, Weibo's five attitudes besides
	// the like); a picker of free-form emoji is another feature.
	MaxKinds = 16
	// MaxKindName bounds a kind's name, which the API and import column
	// headers carry.
	MaxKindName = 32
)

// Reactions holds a post's counts of the kinds other than like: the count
// of kind k (2 <= k <= MaxKinds) is at index k-2. Like's count is the
// post's likes.
type Reactions [MaxKinds - 1]int64

// Get returns the count of kind k, which must not be like or NoKind.
func (r *Reactions) Get(k Kind) int64 { return r[k-2] }

// Add adds d to the count of kind k (not like, not NoKind) within
// [Floor, Ceiling].
func (r *Reactions) Add(k Kind, d int64) { r[k-2] = Add(r[k-2], d) }

// IsZero reports whether every count is zero.
func (r *Reactions) IsZero() bool { return *r == Reactions{} }

// Totals holds a count per kind, by kind id (Totals[Like] is the likes):
// the sum over every post, which tells whether a kind is still in use.
type Totals [MaxKinds + 1]int64

// ValidKindName reports whether name can name a kind: 1 to MaxKindName
// characters, lower-case ASCII letters, digits and '_', starting with a
// letter, so that it is a GraphQL string and an import column header
// (<kind>_count, <kind>s) as it stands.
func ValidKindName(name string) bool {
	if len(name) == 0 || len(name) > MaxKindName || name[0] < 'a' || name[0] > 'z' {
		return false
	}
	for i := range len(name) {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// ParseKinds parses a deployment's list of kinds, comma-separated in
// display order (the -reactions flag): valid names, each once, like
// among them, at most MaxKinds.
func ParseKinds(list string) ([]string, error) {
	var names []string
	seen := map[string]bool{}
	for _, f := range strings.Split(list, ",") {
		name := strings.TrimSpace(f)
		switch {
		case !ValidKindName(name):
			return nil, fmt.Errorf("reaction kind %q: a name is 1 to %d of a-z, 0-9 and _, starting with a letter", name, MaxKindName)
		case seen[name]:
			return nil, fmt.Errorf("reaction kind %q listed twice", name)
		}
		seen[name] = true
		names = append(names, name)
	}
	switch {
	case !seen["like"]:
		return nil, errors.New("reaction kinds must include like (likePost is the reaction like)")
	case len(names) > MaxKinds:
		return nil, fmt.Errorf("%d reaction kinds, at most %d", len(names), MaxKinds)
	}
	return names, nil
}

// Kinds is a kinds table: the name of each kind id in use. The zero value
// is empty; NewKinds has like alone.
type Kinds struct {
	names [MaxKinds + 1]string // by id; "" for an id not in use
}

// NewKinds returns the table of a deployment that has only likes.
func NewKinds() Kinds {
	var k Kinds
	k.names[Like] = "like"
	return k
}

// Name returns the name of kind id, "" when the table has none.
func (k *Kinds) Name(id Kind) string {
	if int(id) >= len(k.names) {
		return ""
	}
	return k.names[id]
}

// Has reports whether the table has kind id.
func (k *Kinds) Has(id Kind) bool { return k.Name(id) != "" }

// ID returns the id of the kind named name, NoKind when there is none.
func (k *Kinds) ID(name string) Kind {
	for id, n := range k.names {
		if n != "" && n == name {
			return Kind(id)
		}
	}
	return NoKind
}

// Len returns the number of kinds in the table.
func (k *Kinds) Len() int {
	n := 0
	for _, name := range k.names {
		if name != "" {
			n++
		}
	}
	return n
}

// IDs returns the ids in use, in increasing order.
func (k *Kinds) IDs() []Kind {
	var ids []Kind
	for id, name := range k.names {
		if name != "" {
			ids = append(ids, Kind(id))
		}
	}
	return ids
}

// Put names kind id, as a decoder of a stored table does: id in [1,
// MaxKinds], like exactly at id 1, a valid name that no other id has, an
// id not named yet.
func (k *Kinds) Put(id Kind, name string) error {
	switch {
	case id == NoKind || id > MaxKinds:
		return fmt.Errorf("reaction kind id %d outside [1, %d]", id, MaxKinds)
	case !ValidKindName(name):
		return fmt.Errorf("reaction kind id %d: invalid name %q", id, name)
	case (id == Like) != (name == "like"):
		return fmt.Errorf("reaction kind id %d named %q: like is id %d, always", id, name, Like)
	case k.names[id] != "":
		return fmt.Errorf("reaction kind id %d named twice", id)
	case k.ID(name) != NoKind:
		return fmt.Errorf("reaction kind %q has two ids", name)
	}
	k.names[id] = name
	return nil
}

// KindInUseError refuses a configuration that leaves out a kind whose
// reactions are still counted.
type KindInUseError struct {
	Name  string // "" for an id with counts and no name (damaged data)
	ID    Kind
	Count int64
}

func (e *KindInUseError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("reaction kind id %d has no name and counts %d reactions", e.ID, e.Count)
	}
	return fmt.Sprintf("reaction kind %q still counts %d reactions: keep it in the reaction kinds", e.Name, e.Count)
}

// Reconcile returns the table for a deployment configured with kinds
// (ParseKinds' result) over the stored table k: kinds k has keep their
// ids, new ones take the lowest free ids, and a stored kind left out is
// dropped (its id freed) if totals says none of its reactions is counted,
// refused with a *KindInUseError otherwise. totals is called only when a
// stored kind is left out (it may walk every post).
func (k Kinds) Reconcile(kinds []string, totals func() (Totals, error)) (Kinds, error) {
	want := map[string]bool{}
	for _, name := range kinds {
		want[name] = true
	}
	next := k
	var dropped []Kind
	for id, name := range k.names {
		if name != "" && !want[name] {
			dropped = append(dropped, Kind(id))
		}
	}
	if len(dropped) > 0 {
		t, err := totals()
		if err != nil {
			return k, err
		}
		for _, id := range dropped {
			if t[id] != 0 {
				return k, &KindInUseError{Name: k.names[id], ID: id, Count: t[id]}
			}
			next.names[id] = ""
		}
		for id, c := range t {
			if c != 0 && next.names[id] == "" {
				return k, &KindInUseError{ID: Kind(id), Count: c}
			}
		}
	}
	for _, name := range kinds {
		if next.ID(name) != NoKind {
			continue
		}
		if name == "like" {
			next.names[Like] = name
			continue
		}
		free := NoKind
		for id := Like + 1; id <= MaxKinds; id++ {
			if next.names[id] == "" {
				free = id
				break
			}
		}
		if free == NoKind {
			return k, fmt.Errorf("reaction kind %q: no free id (at most %d kinds)", name, MaxKinds)
		}
		next.names[free] = name
	}
	return next, nil
}
