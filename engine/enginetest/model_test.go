package enginetest

import (
	"testing"

	"github.com/tally-dev/tally/engine"
	"github.com/tally-dev/tally/engine/enginetest/refmodel"
)

// TestScriptsOnModel holds the reference model to the rule scripts, so
// that the model the metamorphic test trusts states API.md's rules too.
func TestScriptsOnModel(t *testing.T) {
	runScripts(t, Backend{Name: "model"}, func(t *testing.T, cfg Config) (compared, func() (engine.Store, error)) {
		return refmodel.New(cfg.Now, cfg.CursorTTL, cfg.Reactions), nil
	})
}
