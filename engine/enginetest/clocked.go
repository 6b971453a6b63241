package enginetest

import "testing"

// RunClocked runs the suites that need the backend to read a fake clock:
// the rule scripts of testdata/ and the metamorphic test, as subtests
// named after b.
func RunClocked(t *testing.T, b Backend) {
	t.Run(b.Name, func(t *testing.T) {
		t.Run("Scripts", func(t *testing.T) { RunScripts(t, b) })
		t.Run("Metamorphic", func(t *testing.T) { RunMetamorphic(t, b) })
	})
}
