package deploy_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

const imageVersion = "v0.0.0-imagetest"

// podmanHost is how this host runs containers: podman's global flags and
// `podman run`'s flags.
type podmanHost struct {
	podman string
	global []string
	run    []string
}

func (h podmanHost) cmd(args ...string) *exec.Cmd {
	return exec.Command(h.podman, append(append([]string(nil), h.global...), args...)...)
}

// runArgs is `run` with the host's flags, then args.
func (h podmanHost) runArgs(args ...string) []string {
	return append(append([]string{"run"}, h.run...), args...)
}

// containerHost finds how to run image here, by running its `tally
// version`: podman's defaults first, then with the resource limits set to
// ones the host allows, then also with runc. Sandboxed hosts (this
// project's CI machines among them) refuse the defaults: root without
// CAP_SYS_RESOURCE cannot raise RLIMIT_NOFILE/NPROC to podman's defaults,
// and crun 1.8 refuses hybrid cgroup v1/v2 hosts ("cgroups in hybrid mode
// not supported"). It skips the test, with every attempt's error, when
// none works.
func containerHost(t *testing.T, podman, image string) podmanHost {
	t.Helper()
	var nofile syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &nofile); err != nil {
		t.Fatal(err)
	}
	limits := []string{"--ulimit", fmt.Sprintf("nofile=%d:%d", nofile.Cur, nofile.Cur), "--ulimit", "nproc=4096:4096"}
	candidates := []podmanHost{{podman: podman}, {podman: podman, run: limits}}
	if _, err := exec.LookPath("runc"); err == nil {
		candidates = append(candidates, podmanHost{podman: podman, global: []string{"--runtime", "runc"}, run: limits})
	}
	var failures []string
	for _, h := range candidates {
		cmd := h.cmd(h.runArgs("--rm", image, "version")...)
		out, err := cmd.CombinedOutput()
		if err == nil && strings.Contains(string(out), "tally "+imageVersion) {
			t.Logf("containers run here as: %s", strings.Join(cmd.Args, " "))
			return h
		}
		failures = append(failures, fmt.Sprintf("%s: %v: %s", strings.Join(cmd.Args, " "), err, strings.TrimSpace(string(out))))
	}
	msg := "podman cannot run a container on this host:\n\t" + strings.Join(failures, "\n\t")
	if os.Getenv("TALLY_REQUIRE_PODMAN") != "" {
		t.Fatal(msg + "\nTALLY_REQUIRE_PODMAN is set, so this is a failure")
	}
	t.Skip(msg)
	return podmanHost{}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestImage builds the OCI image with scripts/image and runs it: it
// serves on the embedded engine as the unprivileged user, signs tokens
// with its own `tally token`, reports its version, stops cleanly on
// SIGTERM (podman stop), and a new container on the same volume has the
// data the first one wrote.
func TestImage(t *testing.T) {
	podman := needTool(t, "podman", "apt-get install -y podman", "TALLY_REQUIRE_PODMAN")
	id := fmt.Sprintf("tally-imagetest-%d", time.Now().UnixNano())
	image := "localhost/" + id + ":" + imageVersion
	build := exec.Command("scripts/image", "-t", image)
	build.Dir = ".."
	build.Env = append(os.Environ(), "TALLY_VERSION="+imageVersion)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("scripts/image: %v\n%s", err, out)
	}
	t.Cleanup(func() { exec.Command(podman, "rmi", "-f", image).Run() })
	h := containerHost(t, podman, image)
	podmanOut := func(args ...string) string {
		t.Helper()
		out, err := h.cmd(args...).CombinedOutput()
		if err != nil {
			t.Fatalf("podman %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if user := podmanOut("image", "inspect", "--format", "{{.Config.User}}", image); user != "65532:65532" {
		t.Errorf("the image runs as %q, want the unprivileged 65532:65532", user)
	}
	t.Logf("image size: %s bytes", podmanOut("image", "inspect", "--format", "{{.Size}}", image))

	volume := podmanOut("volume", "create", id)
	t.Cleanup(func() { exec.Command(podman, "volume", "rm", "-f", volume).Run() })
	secret := "-e=TALLY_JWT_SECRET=" + testSecret
	token := func(user int) string {
		return podmanOut(h.runArgs("--rm", secret, image, "token", "-user", fmt.Sprint(user))...)
	}
	// start runs the server on the volume; stop ends it with SIGTERM and
	// checks that it drained and exited 0.
	start := func(name string) string {
		t.Helper()
		port := freePort(t)
		podmanOut(h.runArgs("-d", "--name", name, "--network", "host", "-v", volume+":/var/lib/tally", secret,
			image, "-addr", fmt.Sprintf("127.0.0.1:%d", port))...)
		t.Cleanup(func() { exec.Command(podman, "rm", "-f", name).Run() })
		url := fmt.Sprintf("http://127.0.0.1:%d", port)
		deadline := time.Now().Add(30 * time.Second)
		for {
			resp, err := httpClient.Get(url + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					return url
				}
			}
			if time.Now().After(deadline) {
				out, _ := h.cmd("logs", name).CombinedOutput()
				t.Fatalf("the container did not become ready: %v\n%s", err, out)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	stop := func(name string) {
		t.Helper()
		podmanOut("stop", "--time", "30", name)
		if code := podmanOut("inspect", "--format", "{{.State.ExitCode}}", name); code != "0" {
			t.Errorf("%s exited %s after SIGTERM, want 0", name, code)
		}
		if logs := podmanOut("logs", name); !strings.Contains(logs, "msg=stopped") {
			t.Errorf("%s did not log its clean stop:\n%s", name, logs)
		}
	}

	url := start(id + "-1")
	author, fan := token(1), token(2)
	post := mustQuery(t, url, author, `mutation { createPost { id } }`, nil)["createPost"].(map[string]any)["id"].(string)
	mustQuery(t, url, fan, `mutation Like($p: ID!) { likePost(postId: $p) { id } }`, map[string]any{"p": post})
	if _, body := get(t, url+"/metrics"); !strings.Contains(body, `version="`+imageVersion+`"`) {
		t.Errorf("tally_build_info does not carry the image's version %s", imageVersion)
	}
	stop(id + "-1")

	url = start(id + "-2")
	counts := mustQuery(t, url, fan, `query Feed($p: ID!) { post(id: $p) { counts { likes } viewerHasLiked } }`, map[string]any{"p": post})
	if got := fmt.Sprint(counts["post"]); got != "map[counts:map[likes:1] viewerHasLiked:true]" {
		t.Errorf("after a restart on the same volume: %s, want the like kept", got)
	}
	stop(id + "-2")
}
