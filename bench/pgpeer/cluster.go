package pgpeer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tally-dev/tally/bench/benchutil"
)

// Binaries returns the directory holding Debian's postgresql package's
// initdb and postgres: the one on PATH, else the newest
// /usr/lib/postgresql/<version>/bin (Debian leaves them off PATH).
func Binaries() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			dir := filepath.Dir(real)
			if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
				return dir, nil
			}
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, dir := range dirs {
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	return "", errors.New("PostgreSQL is not installed (initdb and postgres not on PATH nor in /usr/lib/postgresql/*/bin): apt-get install -y postgresql")
}

// Cluster is a throwaway PostgreSQL cluster: initdb into a directory of
// its own, one postgres listening on a free loopback port, stopped by its
// pid and deleted by Stop.
type Cluster struct {
	Dir  string // the cluster's directory: data/, the socket, postgres.log
	Addr string // 127.0.0.1:port
	DSN  string // postgres://tally@127.0.0.1:port/postgres
	Log  string
	bin  string              // where initdb and postgres are
	cred *syscall.Credential // who runs them (nil: this process's user)
	cmd  *exec.Cmd
	done chan struct{}
}

// Options are the cluster's settings beyond the bench's defaults.
type Options struct {
	// SharedBuffers is postgres's shared_buffers, e.g. "2GB" ("": 128MB,
	// PostgreSQL's default).
	SharedBuffers string
	// CPUs runs postgres under taskset -c CPUs ("": anywhere).
	CPUs string
}

// Settings every cluster gets. Nothing in it must survive a crash, so
// durability is off (the benchmarks measure reads, sizes and memory, not
// writes); one superuser, trusted on loopback.
var baseSettings = []string{
	"listen_addresses=127.0.0.1",
	"fsync=off", "synchronous_commit=off", "full_page_writes=off",
	"max_wal_size=4GB", "checkpoint_timeout=30min",
	"maintenance_work_mem=512MB",
	"logging_collector=off",
}

// The superuser initdb makes.
const superuser = "tally"

// Start makes a cluster in a new directory under $TMPDIR and starts it.
// PostgreSQL refuses to run as root: when the process is root, initdb and
// postgres run as the postgres user the package creates (else nobody),
// which owns the directory.
func Start(ctx context.Context, opt Options) (*Cluster, error) {
	bin, err := Binaries()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "tally-postgres-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Log: filepath.Join(dir, "postgres.log"), bin: bin}
	fail := func(err error) (*Cluster, error) {
		os.RemoveAll(dir)
		return nil, err
	}
	if c.cred, err = unprivileged(); err != nil {
		return fail(err)
	}
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fail(err)
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", filepath.Join(dir, "data"), "-U", superuser, "--auth=trust",
		"--encoding=UTF8", "--locale=C", "--no-sync")
	initdb.Dir = dir
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	port, err := benchutil.FreePort()
	if err != nil {
		return fail(err)
	}
	c.Addr = "127.0.0.1:" + strconv.Itoa(port)
	c.DSN = fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", superuser, c.Addr)
	if err := c.launch(ctx, opt); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// Restart stops postgres and starts it again on the same data and port
// with opt (shared_buffers is only read at start).
func (c *Cluster) Restart(ctx context.Context, opt Options) error {
	c.shutdown()
	return c.launch(ctx, opt)
}

// launch starts postgres on the cluster's data and waits until it
// accepts connections.
func (c *Cluster) launch(ctx context.Context, opt Options) error {
	_, port, _ := strings.Cut(c.Addr, ":")
	args := []string{"-D", filepath.Join(c.Dir, "data"), "-p", port, "-c", "unix_socket_directories=" + c.Dir}
	settings := baseSettings
	if opt.SharedBuffers != "" {
		settings = append(slices.Clone(settings), "shared_buffers="+opt.SharedBuffers)
	}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	logf, err := os.OpenFile(c.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	postgres := filepath.Join(c.bin, "postgres")
	if opt.CPUs != "" {
		args = append([]string{"-c", opt.CPUs, postgres}, args...)
		postgres = "taskset"
	}
	c.cmd = exec.Command(postgres, args...)
	c.cmd.Dir = c.Dir
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	// Pdeathsig: a cluster must not outlive the benchmark that started
	// it; postgres's own processes end when their postmaster does.
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}
	if err := c.cmd.Start(); err != nil {
		logf.Close()
		c.cmd = nil
		return fmt.Errorf("starting postgres: %w", err)
	}
	done := make(chan struct{})
	c.done = done
	cmd := c.cmd
	go func() { cmd.Wait(); logf.Close(); close(done) }()
	return c.waitReady(ctx)
}

// unprivileged is who runs postgres: nil (this process's user) unless it
// is root.
func unprivileged() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 == nil && err2 == nil {
			return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
		}
	}
	return nil, errors.New("running as root, and neither a postgres nor a nobody user exists to run PostgreSQL as")
}

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := c.Connect(ctx)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres on %s not ready after 60 s: %v; %s", c.Addr, err, tail(c.Log))
		}
		select {
		case <-c.done:
			return fmt.Errorf("postgres exited at start: %s", tail(c.Log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Connect opens one connection to the cluster.
func (c *Cluster) Connect(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, c.DSN) }

// PID is the postmaster's.
func (c *Cluster) PID() int { return c.cmd.Process.Pid }

// Processes are the postmaster and its children (checkpointer, writers,
// one backend per connection).
func (c *Cluster) Processes() []int {
	pids := []int{c.PID()}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", c.PID(), c.PID()))
	if err != nil {
		return pids
	}
	for f := range strings.FieldsSeq(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Memory is what the cluster's processes hold: the sum of their
// proportional set sizes (Pss: a page shared by n processes, such as
// shared_buffers, counts 1/n in each, so once in the sum) and of their
// RSS (shared pages counted in every process that touched them).
func (c *Cluster) Memory() (pss, rss int64) {
	for _, pid := range c.Processes() {
		pss += max(smapsRollup(pid, "Pss"), 0)
		rss += max(benchutil.ProcStatus(pid, "VmRSS"), 0)
	}
	return pss, rss
}

// CPU is the cluster's processes' CPU time so far (those alive now).
func (c *Cluster) CPU() time.Duration {
	var total time.Duration
	for _, pid := range c.Processes() {
		total += max(benchutil.ProcCPU(pid), 0)
	}
	return total
}

// smapsRollup reads a field of /proc/<pid>/smaps_rollup in bytes; -1
// when unknown.
func smapsRollup(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return -1
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		rest, ok := strings.CutPrefix(line, field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseInt(f[0], 10, 64); err == nil && len(f) > 1 && f[1] == "kB" {
			return v << 10
		}
	}
	return -1
}

// Stop shuts postgres down and deletes the cluster's directory.
func (c *Cluster) Stop() {
	if c == nil {
		return
	}
	c.shutdown()
	os.RemoveAll(c.Dir)
}

// shutdown stops postgres (SIGINT, its fast shutdown; SIGQUIT, its
// immediate one, after 30 s) by the postmaster's pid.
func (c *Cluster) shutdown() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Signal(syscall.SIGQUIT)
		<-c.done
	}
	c.cmd = nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 800 {
		b = b[len(b)-800:]
	}
	return strings.TrimSpace(string(b))
}
