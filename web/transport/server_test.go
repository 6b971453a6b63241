package transport

import (
	"github.com/tally-dev/tally/engine/embedded"
	"github.com/tally-dev/tally/engine/redisstore"
)

// The backends offer what registerStoreMetrics asks them by interface.
var (
	_ snapshotLagger = (*embedded.Engine)(nil)
	_ intentSweeper  = (*redisstore.Store)(nil)
)
