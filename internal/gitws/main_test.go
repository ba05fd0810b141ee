package gitws

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/toolgate/toolgate/internal/leakcheck"
)

// podClaimEnv, set to a claim's folder, makes the test binary a workspace pod: it
// carries out the request of RequestEnv on that claim (Run, as `runner git` does)
// and prints the Result as JSON on stdout.
const podClaimEnv = "GITWS_TEST_POD_CLAIM"

func TestMain(m *testing.M) {
	if claim := os.Getenv(podClaimEnv); claim != "" {
		res := Run(context.Background(), []byte(os.Getenv(RequestEnv)), Mounts{Claim: claim}, io.Discard)
		if err := json.NewEncoder(os.Stdout).Encode(res); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	// No test reaches a resolver: every DNS query goes to a port of the loopback
	// where nothing listens, and is refused. A host name then "does not resolve"
	// without a packet leaving the machine.
	net.DefaultResolver = &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, "127.0.0.1:1")
	}}
	os.Exit(leakcheck.Main(m.Run))
}

// runPodUnprivileged carries out req on claim in a workspace pod of its own (this
// test binary, see podClaimEnv) that runs as a user who is not root: as nobody
// when the tests run as root, else as the tests' own user. The claim's folders
// must let nobody in.
func runPodUnprivileged(t *testing.T, claim string, req Request) Result {
	t.Helper()
	raw, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	// /proc/self/exe is the child's own executable, this test binary: exec'd
	// through it, the binary needs no folder that nobody may enter (go test builds
	// it in one only root enters).
	cmd := exec.Command("/proc/self/exe", "-test.run=^$")
	cmd.Env = append(os.Environ(), podClaimEnv+"="+claim, RequestEnv+"="+string(raw))
	if os.Geteuid() == 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the workspace pod: %v\n%s", err, stderr.String())
	}
	var res Result
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("the workspace pod's output is not a Result: %v\n%s", err, out)
	}
	return res
}

// openToAll lets every user into dir and the folders above it up to the tests'
// temporary directory (t.TempDir makes them for root alone).
func openToAll(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != filepath.Dir(d); d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}
