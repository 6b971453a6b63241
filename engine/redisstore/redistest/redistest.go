// Package redistest starts real redis-server processes for tests: a single
// node or a Redis Cluster, on free loopback ports, with their files under
// t.TempDir(). It owns the lifecycle of those processes: every process it
// starts is stopped by PID in t.Cleanup, including nodes a test killed and
// restarted. It never mocks Redis; when redis-server is not installed the
// test is skipped, unless TALLY_REQUIRE_REDIS is set, which turns the skip
// into a failure so CI cannot pass by silently testing nothing.
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerArgs are the settings every node gets. The listpack limits are the
// ones engine/redisstore documents: post and user buckets hold up to ~1,000
// entries of at most 64 bytes, and stay in the compact listpack encoding.
// The append-only file is fsynced every second: a test that kills a node
// and expects every acknowledged write back passes AlwaysFsync.
var ServerArgs = []string{
	"--save", "",
	"--appendonly", "yes",
	"--appendfsync", "everysec",
	"--hash-max-listpack-entries", "1024",
	"--hash-max-listpack-value", "64",
	"--protected-mode", "no",
	"--daemonize", "no",
	// A replica that (re)joins is sent its full copy at once, not after
	// the default 5 s wait for other replicas to share the transfer.
	"--repl-diskless-sync-delay", "0",
}

// AlwaysFsync makes a node fsync its append-only file before answering a
// write, so a kill -9 loses nothing acknowledged (pass to StartSingleNode).
var AlwaysFsync = []string{"--appendfsync", "always"}

// binaries returns the paths of redis-server and redis-cli, or ends the test.
func binaries(t testing.TB) (server, cli string) {
	t.Helper()
	server, err1 := exec.LookPath("redis-server")
	cli, err2 := exec.LookPath("redis-cli")
	if err1 == nil && err2 == nil {
		return server, cli
	}
	msg := "redis-server and redis-cli are not on PATH (install with: apt-get install -y redis-server)"
	if os.Getenv("TALLY_REQUIRE_REDIS") != "" {
		t.Fatal(msg + "; TALLY_REQUIRE_REDIS is set, so this is a failure")
	}
	t.Skip(msg + "; set TALLY_REQUIRE_REDIS=1 to make this a failure")
	return "", ""
}

// Available reports whether redis-server and redis-cli are installed.
func Available() bool {
	_, err1 := exec.LookPath("redis-server")
	_, err2 := exec.LookPath("redis-cli")
	return err1 == nil && err2 == nil
}

// Node is one redis-server process.
type Node struct {
	Addr    string // 127.0.0.1:port
	Port    int
	BusPort int // cluster bus port, 0 for a single node
	Dir     string

	t       testing.TB
	server  string
	args    []string
	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	stopped bool
}

// PID returns the process id of the running server, or 0 if it is down.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	select {
	case <-n.exited:
		return 0
	default:
		return n.cmd.Process.Pid
	}
}

// freePort returns a loopback port that was free a moment ago. A cluster
// node needs its bus port too, so callers ask for two and retry on a clash.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DefaultNodeTimeout is the cluster-node-timeout of StartCluster: short,
// so that a failover test takes seconds.
const DefaultNodeTimeout = 1500 * time.Millisecond

func newNode(t testing.TB, server, dir string, cluster bool, nodeTimeout time.Duration, extra []string) (*Node, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	n := &Node{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, Dir: dir, t: t, server: server}
	n.args = append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--logfile", filepath.Join(dir, "redis.log"),
		"--pidfile", filepath.Join(dir, "redis.pid"),
	}, ServerArgs...)
	if cluster {
		bus, err := freePort()
		if err != nil {
			return nil, err
		}
		n.BusPort = bus
		n.args = append(n.args,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(bus),
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			// Fast failure detection so the failover test takes seconds;
			// a replica is always eligible, and nodes keep serving the
			// slots they own while another shard is down (fail fast per
			// shard rather than a whole-cluster outage).
			"--cluster-node-timeout", strconv.FormatInt(nodeTimeout.Milliseconds(), 10),
			"--cluster-replica-validity-factor", "0",
			"--cluster-require-full-coverage", "no",
		)
	}
	n.args = append(n.args, extra...)
	return n, nil
}

// start launches the process and waits until it answers PING.
func (n *Node) start() error {
	n.mu.Lock()
	cmd := exec.Command(n.server, n.args...)
	cmd.Dir = n.Dir
	// Own process group: a test binary killed by a signal must not leave
	// the child attached to the terminal's group; Cleanup kills by PID.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		n.mu.Unlock()
		return err
	}
	exited := make(chan struct{})
	n.cmd, n.exited = cmd, exited
	n.stopped = false
	n.mu.Unlock()
	go func() { _ = cmd.Wait(); close(exited) }()

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("redis-server on %s exited at start: %s", n.Addr, n.logTail())
		default:
		}
		if ping(n.Addr) == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.Kill()
	return fmt.Errorf("redis-server on %s did not answer PING within 10s: %s", n.Addr, n.logTail())
}

func (n *Node) logTail() string {
	b, _ := os.ReadFile(filepath.Join(n.Dir, "redis.log"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// Kill sends SIGKILL to the server (a crash, not a shutdown) and waits for
// it to exit. Killing a node that is down does nothing.
func (n *Node) Kill() {
	n.mu.Lock()
	cmd, exited := n.cmd, n.exited
	n.stopped = true
	n.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		n.t.Errorf("redis-server pid %d did not exit after SIGKILL", cmd.Process.Pid)
	}
}

// Pause stops the server (SIGSTOP): it answers nothing, neither clients
// nor its master's replication stream nor the cluster bus, until Resume.
// The kernel still takes what peers send it, up to its socket buffers.
func (n *Node) Pause() { n.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (n *Node) Resume() { n.signal(syscall.SIGCONT) }

func (n *Node) signal(sig syscall.Signal) {
	n.t.Helper()
	pid := n.PID()
	if pid == 0 {
		n.t.Fatalf("redis-server on %s is not running", n.Addr)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		n.t.Fatalf("signal %v to redis-server pid %d: %v", sig, pid, err)
	}
}

// Restart starts a killed node again on the same port and directory, so it
// reloads its append-only file (and, in a cluster, its nodes.conf).
func (n *Node) Restart() {
	n.t.Helper()
	n.Kill()
	var err error
	for range 20 {
		if err = n.start(); err == nil {
			return
		}
		// The port may linger briefly after a kill.
		time.Sleep(100 * time.Millisecond)
	}
	n.t.Fatalf("restart %s: %v", n.Addr, err)
}

// ping speaks just enough RESP to ask a node whether it is up, without a
// client library, so the harness can wait for a node before anything else.
func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return errors.New(strings.TrimSpace(line))
	}
	return nil
}

func startNode(t testing.TB, server, dir string, cluster bool, nodeTimeout time.Duration, extra []string) *Node {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var lastErr error
	// A free port can be taken between our probe and the server's bind:
	// pick new ports and try again.
	for range 5 {
		n, err := newNode(t, server, dir, cluster, nodeTimeout, extra)
		if err != nil {
			lastErr = err
			continue
		}
		if err := n.start(); err != nil {
			lastErr = err
			continue
		}
		t.Cleanup(n.Kill)
		return n
	}
	t.Fatalf("start redis-server: %v", lastErr)
	return nil
}

// StartSingle starts one standalone redis-server and returns its address
// and a stop function (also run by t.Cleanup).
func StartSingle(t testing.TB) (addr string, stop func()) {
	t.Helper()
	n := StartSingleNode(t)
	return n.Addr, n.Kill
}

// StartSingleNode is StartSingle returning the Node, for tests that kill
// and restart it.
func StartSingleNode(t testing.TB, extra ...string) *Node {
	t.Helper()
	server, _ := binaries(t)
	return startNode(t, server, filepath.Join(t.TempDir(), "single"), false, 0, extra)
}

// Cluster is a running Redis Cluster.
type Cluster struct {
	Nodes []*Node
	t     testing.TB
}

// StartCluster starts masters*(1+replicasPerMaster) nodes with
// --cluster-enabled yes, joins them with redis-cli --cluster create and
// waits until every node reports cluster_state:ok.
func StartCluster(t testing.TB, masters, replicasPerMaster int) *Cluster {
	t.Helper()
	return StartClusterWith(t, ClusterConfig{Masters: masters, ReplicasPerMaster: replicasPerMaster})
}

// ClusterConfig shapes a cluster: its size, its nodes' failure detection
// timeout (0: DefaultNodeTimeout) and extra server arguments for every
// node (say AlwaysFsync).
type ClusterConfig struct {
	Masters, ReplicasPerMaster int
	NodeTimeout                time.Duration
	Extra                      []string
}

// StartClusterWith is StartCluster shaped by cfg.
func StartClusterWith(t testing.TB, cfg ClusterConfig) *Cluster {
	t.Helper()
	masters, replicasPerMaster := cfg.Masters, cfg.ReplicasPerMaster
	if cfg.NodeTimeout == 0 {
		cfg.NodeTimeout = DefaultNodeTimeout
	}
	if masters < 3 {
		t.Fatalf("redis-cli --cluster create needs at least 3 masters, got %d", masters)
	}
	server, cli := binaries(t)
	root := t.TempDir()
	c := &Cluster{t: t}
	total := masters * (1 + replicasPerMaster)
	for i := range total {
		c.Nodes = append(c.Nodes, startNode(t, server, filepath.Join(root, fmt.Sprintf("node%d", i)), true, cfg.NodeTimeout, cfg.Extra))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	out, err := exec.Command(cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(30 * time.Second)
	return c
}

// Addrs lists the addresses of all nodes, masters and replicas.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr
	}
	return out
}

// Node returns the node listening on addr, or nil.
func (c *Cluster) Node(addr string) *Node {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// Kill crashes the node at addr (SIGKILL, by PID).
func (c *Cluster) Kill(addr string) { c.mustNode(addr).Kill() }

// Restart starts the node at addr again with its old data and identity.
func (c *Cluster) Restart(addr string) { c.mustNode(addr).Restart() }

func (c *Cluster) mustNode(addr string) *Node {
	n := c.Node(addr)
	if n == nil {
		c.t.Fatalf("no cluster node %s", addr)
	}
	return n
}

func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, MaxRetries: -1, Protocol: 2,
		DisableIdentity: true,
	})
}

// Masters returns the addresses of the current masters, as the first
// reachable live node sees them.
func (c *Cluster) Masters() []string {
	var out []string
	for _, n := range c.Nodes {
		if n.PID() == 0 {
			continue
		}
		cl := nodeClient(n.Addr)
		text, err := cl.ClusterNodes(context.Background()).Result()
		cl.Close()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(text, "\n") {
			f := strings.Fields(line)
			if len(f) < 8 || !strings.Contains(f[2], "master") || strings.Contains(f[2], "fail") {
				continue
			}
			if strings.Contains(f[2], "noaddr") || f[7] != "connected" {
				continue
			}
			out = append(out, strings.SplitN(f[1], "@", 2)[0])
		}
		return out
	}
	return nil
}

// ReplicasOf returns the addresses of the live replicas of the master at
// addr, as that master sees them (INFO replication).
func (c *Cluster) ReplicasOf(addr string) []string {
	cl := nodeClient(addr)
	defer cl.Close()
	info, err := cl.Info(context.Background(), "replication").Result()
	if err != nil {
		c.t.Fatalf("replicas of %s: %v", addr, err)
	}
	var out []string
	for _, line := range strings.Split(info, "\n") {
		name, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if !strings.HasPrefix(name, "slave") || !strings.Contains(v, "ip=") {
			continue
		}
		var ip, port string
		for _, kv := range strings.Split(v, ",") {
			k, val, _ := strings.Cut(kv, "=")
			switch k {
			case "ip":
				ip = val
			case "port":
				port = val
			}
		}
		out = append(out, ip+":"+port)
	}
	return out
}

// CutReplicas closes the replication links of the master at addr, as a
// network partition between it and its replicas would: a replica that
// is running reconnects within about a second and catches up from the
// master's backlog; a paused one cannot until it is resumed.
func (c *Cluster) CutReplicas(addr string) {
	cl := nodeClient(addr)
	defer cl.Close()
	if err := cl.Do(context.Background(), "CLIENT", "KILL", "TYPE", "replica").Err(); err != nil {
		c.t.Fatalf("cut the replicas of %s: %v", addr, err)
	}
}

// MasterForKey returns the address of the master serving key's slot.
func (c *Cluster) MasterForKey(key string) string {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.liveAddrs(), Protocol: 2, DisableIdentity: true})
	defer cc.Close()
	cl, err := cc.MasterForKey(context.Background(), key)
	if err != nil {
		c.t.Fatalf("master for %q: %v", key, err)
	}
	return cl.Options().Addr
}

func (c *Cluster) liveAddrs() []string {
	var out []string
	for _, n := range c.Nodes {
		if n.PID() != 0 {
			out = append(out, n.Addr)
		}
	}
	return out
}

// WaitOK waits until every live node reports cluster_state:ok, all slots
// assigned and served, and agrees on the set of masters.
func (c *Cluster) WaitOK(timeout time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if last = c.notOK(); last == "" {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("cluster not ok within %v: %s", timeout, last)
}

// notOK explains why the cluster is not healthy yet, or returns "".
func (c *Cluster) notOK() string {
	ctx := context.Background()
	for _, n := range c.Nodes {
		if n.PID() == 0 {
			continue
		}
		cl := nodeClient(n.Addr)
		info, err := cl.ClusterInfo(ctx).Result()
		cl.Close()
		if err != nil {
			return n.Addr + ": " + err.Error()
		}
		if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return n.Addr + ": " + strings.Join(strings.Fields(info)[:4], " ")
		}
		// A replica still in its first sync would make WAIT time out.
		cl = nodeClient(n.Addr)
		repl, err := cl.Info(ctx, "replication").Result()
		cl.Close()
		if err != nil {
			return n.Addr + ": " + err.Error()
		}
		if strings.Contains(repl, "role:slave") && !strings.Contains(repl, "master_link_status:up") {
			return n.Addr + ": replica not in sync"
		}
	}
	return ""
}

// WaitFailover waits until addr is no longer listed as a master and every
// slot is served again (a replica has been promoted), and every live node
// agrees.
func (c *Cluster) WaitFailover(addr string, timeout time.Duration) {
	c.t.Helper()
	c.waitPromoted(addr, timeout, true)
}

// WaitPromoted waits until addr is no longer listed as a master and as
// many masters serve the slots as before, as the first node that answers
// sees it; unlike WaitFailover it asks nothing of the other nodes (some
// may be paused).
func (c *Cluster) WaitPromoted(addr string, masters int, timeout time.Duration) {
	c.t.Helper()
	c.waitPromoted(addr, timeout, false, masters)
}

func (c *Cluster) waitPromoted(addr string, timeout time.Duration, allOK bool, want ...int) {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		masters := c.Masters()
		promoted := len(masters) > 0 && (len(want) == 0 || len(masters) == want[0])
		for _, m := range masters {
			if m == addr {
				promoted = false
			}
		}
		if promoted && (!allOK || c.notOK() == "") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("no replica of %s promoted within %v (masters %v)", addr, timeout, c.Masters())
}
