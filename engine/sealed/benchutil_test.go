package sealed

import "github.com/tally-dev/tally/bench/benchutil"

var (
	threadCPU    = benchutil.ThreadCPU
	lockThread   = benchutil.LockThread
	unlockThread = benchutil.UnlockThread
	benchN       = benchutil.N()
)
