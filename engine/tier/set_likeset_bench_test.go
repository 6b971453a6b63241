//go:build likesetpeer

package tier

import (
	"testing"
	"time"

	"github.com/tally-dev/tally/bench/datagen"
	"github.com/tally-dev/tally/engine/likeset"
)

// engine/likeset, the set tier.Set replaces, as a peer of the set's
// benchmarks (set_bench_test.go), on the same data. This file goes when
// engine/likeset does.
func init() {
	setPeers = append(setPeers, setPeer{
		name:     "likeset",
		policies: []string{"open", "default", "sealed"},
		load: func(b testing.TB, policy string, n int) peerSet {
			o := likeset.Options{}
			switch policy {
			case "open":
				o.OpenAge = 100 * 365 * 24 * time.Hour
			case "sealed":
				o.OpenAge = -1
			}
			s, err := likeset.New(o)
			if err != nil {
				b.Fatal(err)
			}
			if policy == "open" {
				for u, p := range benchLikes(n) {
					s.Add(u, p)
				}
			} else if err := s.Load(benchLikes(n), datagen.DefaultEnd); err != nil {
				b.Fatal(err)
			}
			return peerSet{
				hasMany: s.HasMany,
				add:     func(u, p uint64) { s.Add(u, p) },
				maintain: func(now time.Time) {
					if err := s.Maintain(now); err != nil {
						b.Fatal(err)
					}
				},
				length: s.Len(),
				keep:   s,
			}
		},
	})
}
