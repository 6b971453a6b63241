//go:build race

package tier

// raceOn: the race detector makes sync.Pool drop items at random, so a
// pooled buffer may be allocated anew.
const raceOn = true
