package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tally-dev/tally/bench/benchutil"
)

// server is one process the tool measures: a tally (spawned or already
// running) or the reference server.
type server struct {
	name    string
	base    string // http://host:port
	pid     int    // 0: unknown (a server the tool did not start and -pid not given)
	cmd     *exec.Cmd
	done    chan struct{} // closed when a started process has exited
	logPath string
	tally   bool
	pprof   string // base URL of tally's -pprof listener, when the tool started it with one
	// backendCPU is the CPU so far of the store a spawned server uses
	// (tally's redis-server, the peer's PostgreSQL cluster; -1 unknown),
	// which counts as the server's.
	backendCPU func() time.Duration
	// replicas are the other tally processes on the same backend (-replicas),
	// which the subscriptions are spread over.
	replicas []*server
	note     string // what the start had to change (flags refused)
}

// all is s and its replicas.
func (s *server) all() []*server { return append([]*server{s}, s.replicas...) }

// collectGarbage asks a tally started with -pprof for a heap profile with
// gc=1, which runs a full GC first, so that the heap figures that follow
// are live memory rather than live memory plus uncollected garbage.
func (s *server) collectGarbage() bool {
	if s.pprof == "" {
		return false
	}
	resp, err := http.Get(s.pprof + "/debug/pprof/heap?gc=1")
	if err != nil {
		return false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode == 200
}

// cpu returns the process's user+system CPU time from /proc/<pid>/stat
// (10 ms resolution), or from tally's /metrics (process_cpu_seconds_total)
// when the pid is unknown; -1 when neither is available.
func (s *server) cpu() time.Duration {
	own := s.ownCPU()
	if s.backendCPU != nil && own >= 0 {
		if b := s.backendCPU(); b >= 0 {
			return own + b
		}
		return -1
	}
	return own
}

// storeCPU is the CPU so far of the store's processes alone; -1 when
// the server has none or it is unknown.
func (s *server) storeCPU() time.Duration {
	if s.backendCPU == nil {
		return -1
	}
	return s.backendCPU()
}

func (s *server) ownCPU() time.Duration {
	if cpu := benchutil.ProcCPU(s.pid); cpu >= 0 {
		return cpu
	}
	if s.tally {
		if m, err := s.scrape(); err == nil {
			if v, ok := m["process_cpu_seconds_total"]; ok {
				return time.Duration(v * float64(time.Second))
			}
		}
	}
	return -1
}

// status returns a field of /proc/<pid>/status (benchutil.ProcStatus).
func (s *server) status(field string) int64 { return benchutil.ProcStatus(s.pid, field) }

// openFilesLimit reads the process's soft RLIMIT_NOFILE from
// /proc/<pid>/limits; -1 when unknown.
func (s *server) openFilesLimit() int64 {
	if s.pid <= 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", s.pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, err := strconv.ParseInt(f[0], 10, 64)
				if err == nil {
					return v
				}
			}
		}
	}
	return -1
}

// scrape reads tally's /metrics (benchutil.ScrapeMetrics).
func (s *server) scrape() (map[string]float64, error) { return benchutil.ScrapeMetrics(s.base) }

// stop ends a process the tool started: SIGTERM, then SIGKILL after 10 s,
// by its pid only.
func (s *server) stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
	}
}

// start runs bin with args (under taskset -c cpus when cpus is set), its
// output to logPath.
func start(name, cpus, bin string, args, env []string, logPath string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	if cpus != "" {
		args = append([]string{"-c", cpus, bin}, args...)
		bin = "taskset"
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	s := &server{name: name, cmd: cmd, pid: cmd.Process.Pid, logPath: logPath, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	return s, nil
}

// waitHTTP waits until GET url answers 200, or the process exits, or 60 s.
func (s *server) waitHTTP(path string) error {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(s.base + path)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("%s exited at start: %s", s.name, tail(s.logPath))
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not answer %s within 60 s: %s", s.name, path, tail(s.logPath))
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 600 {
		b = b[len(b)-600:]
	}
	return strings.TrimSpace(string(b))
}

// findRepo finds the tally module (its go.mod) from the working directory
// upward.
func findRepo() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/tally-dev/tally\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("-spawn: no tally module (go.mod) above the working directory; give -repo")
		}
		dir = parent
	}
}

// buildTally builds the tally binary of repo into dir.
func buildTally(repo, dir string) (string, error) {
	bin := filepath.Join(dir, "tally")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build tally: %v\n%s", err, out)
	}
	return bin, nil
}

// startRedis starts a redis-server on a free loopback port with Tally's
// recommended settings (AOF fsynced every second, listpack limits).
func startRedis(dir, cpus string) (*server, string, error) {
	port, err := benchutil.FreePort()
	if err != nil {
		return nil, "", err
	}
	rdir := filepath.Join(dir, "redis")
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, "", err
	}
	s, err := start("redis-server", cpus, "redis-server", []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", rdir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec",
		"--hash-max-listpack-entries", "1024", "--hash-max-listpack-value", "64",
		"--protected-mode", "no", "--daemonize", "no",
	}, nil, filepath.Join(dir, "redis.log"))
	if err != nil {
		return nil, "", err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.SetDeadline(time.Now().Add(time.Second))
			io.WriteString(c, "PING\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				s.base = "redis://" + addr
				return s, addr, nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	return nil, "", fmt.Errorf("redis-server on %s did not answer PING: %s", addr, tail(s.logPath))
}

// startTally starts a tally binary on a free port with a fresh data
// directory (or on redisAddr), with -reactions reactions when it has the
// flag. A tally that refuses the kinds at start (a backend without them)
// is started again without the flag, and the server's note says so: the
// tool asks each server which kinds it serves rather than knowing which
// backend has which.
func startTally(name, bin, dir, cpus, secret, redisAddr, reactions string, extra []string) (*server, error) {
	help, _ := exec.Command(bin, "-h").CombinedOutput()
	if reactions == "" || !bytes.Contains(help, []byte("-reactions")) {
		return launchTally(name, bin, dir, cpus, secret, redisAddr, help, extra)
	}
	s, err := launchTally(name, bin, dir, cpus, secret, redisAddr, help, append([]string{"-reactions", reactions}, extra...))
	if err == nil || !strings.Contains(err.Error(), "-reactions") {
		return s, err
	}
	if s, err = launchTally(name, bin, dir, cpus, secret, redisAddr, help, extra); err == nil {
		s.note = fmt.Sprintf("refused -reactions %s, started with its default", reactions)
	}
	return s, err
}

// launchTally starts bin with args for tally's -h output help.
func launchTally(name, bin, dir, cpus, secret, redisAddr string, help []byte, extra []string) (*server, error) {
	port, err := benchutil.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"-addr", addr, "-data", filepath.Join(dir, name+"-data")}
	// Older tally binaries (an earlier commit, for a before/after) may
	// lack -pprof or -log-level.
	if bytes.Contains(help, []byte("-log-level")) {
		args = append(args, "-log-level", "warn")
	}
	paddr := ""
	if bytes.Contains(help, []byte("-pprof")) {
		pport, err := benchutil.FreePort()
		if err != nil {
			return nil, err
		}
		paddr = "127.0.0.1:" + strconv.Itoa(pport)
		args = append(args, "-pprof", paddr)
	}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	args = append(args, extra...)
	s, err := start(name, cpus, bin, args, []string{"TALLY_JWT_SECRET=" + secret}, filepath.Join(dir, name+".log"))
	if err != nil {
		return nil, err
	}
	s.base, s.tally = "http://"+addr, true
	if paddr != "" {
		s.pprof = "http://" + paddr
	}
	if err := s.waitHTTP("/readyz"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// startReference starts this program again as the reference server.
func startReference(dir, cpus, secret string) (*server, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	port, err := benchutil.FreePort()
	if err != nil {
		return nil, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	s, err := start("reference", cpus, self, []string{"-reference", "-addr", addr}, []string{"TALLY_JWT_SECRET=" + secret}, filepath.Join(dir, "reference.log"))
	if err != nil {
		return nil, err
	}
	s.base = "http://" + addr
	if err := s.waitHTTP("/healthz"); err != nil {
		s.stop()
		return nil, err
	}
	return s, nil
}

// raiseOpenFiles lifts this process's soft RLIMIT_NOFILE to the hard limit
// and reports whether need descriptors fit.
func raiseOpenFiles(need int) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return 0, err
		}
	}
	if uint64(need) > lim.Cur {
		return lim.Cur, fmt.Errorf("need %d open files but RLIMIT_NOFILE's hard limit is %d: raise it (ulimit -Hn, or LimitNOFILE= in systemd)", need, lim.Cur)
	}
	return lim.Cur, nil
}

// toolCPU is this process's user+system CPU time so far.
func toolCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the machine's 1-minute load average (/proc/loadavg): other
// processes on the same cores are the main noise in every figure.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return "?"
	}
	return f[0]
}
