package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"runtime/debug"
	"time"

	"github.com/toolgate/toolgate/internal/protocol"
	"github.com/toolgate/toolgate/internal/workspace"
)

// Config is where the runner finds things; the defaults are the pod's fixed locations.
type Config struct {
	// WorkspaceRoot is the workspace folder (default workspace.Root).
	WorkspaceRoot string
	// Log receives the tool's combined output: the runner's stdout.
	Log io.Writer
	// KillGrace is how long a timed-out process group gets between SIGTERM and
	// SIGKILL (default DefaultKillGrace).
	KillGrace time.Duration
	// RootProbeDir is where the runner tries to create a file to find out whether the
	// root filesystem is read-only (default "/").
	RootProbeDir string
	// Environ is the runner's own environment: bash's PATH is taken from it, and
	// the targets that prove the call's walls (walls.go).
	Environ []string
	// HomeParent is where a bash call's home folder is made (default os.TempDir(),
	// the pod's /tmp).
	HomeParent string
	// ResolvConf lists the nameservers a DNS probe tries (default
	// /etc/resolv.conf); WallWait and ProbeTimeout default to the constants of
	// those names (walls.go).
	ResolvConf   string
	WallWait     time.Duration
	ProbeTimeout time.Duration
}

// errTimedOut is the cause of a context that ended at the invocation's timeout.
var errTimedOut = errors.New("timed out")

// stopped is the Timeout error of a tool whose context ended: at the invocation's
// timeout, or because the runner itself was terminated.
func stopped(ctx context.Context, tool string) error {
	if errors.Is(context.Cause(ctx), errTimedOut) {
		return &toolError{kind: protocol.KindTimeout, msg: fmt.Sprintf("%s timed out", tool)}
	}
	return &toolError{kind: protocol.KindTimeout, msg: fmt.Sprintf("%s was stopped: %s", tool, stopCause(ctx))}
}

// stopCause says why ctx ended early: its cause when one was given (a session
// call's stream closed), else the Job's runner was terminated.
func stopCause(ctx context.Context) string {
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) && !errors.Is(cause, errTimedOut) {
		return cause.Error()
	}
	return "the runner was terminated (the Job's deadline passed or its pod is being deleted)"
}

// DefaultKillGrace is the time between SIGTERM and SIGKILL for a timed-out tool.
const DefaultKillGrace = 2 * time.Second

// executionNameRE is what an Execution name may look like (a DNS subdomain); it
// becomes one folder name under ArtifactDir.
var executionNameRE = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)

// invocationContext is what a tool gets to run with.
type invocationContext struct {
	inv  protocol.Invocation
	ws   *Workspace
	out  *output
	cfg  Config
	res  *protocol.Result
	done func() // stops the clock for DurationMs, for tools that wait after the tool ends
}

// toolFunc runs one tool. It writes the tool's output to ic.out, sets tool facts on
// ic.res, and returns an error whose kind (toolError) says why it failed. bash sets the
// exit code itself.
type toolFunc func(ctx context.Context, ic *invocationContext) error

// toolFuncs maps tool names to their implementation.
var toolFuncs = map[string]toolFunc{
	"bash":       runBash,
	"read_file":  runReadFile,
	"write_file": runWriteFile,
	"edit_file":  runEditFile,
	"glob":       runGlob,
	"grep":       runGrep,
	"list_dir":   runListDir,
}

// Run runs the Invocation given as JSON and returns its Result. It never panics: a
// panic in a tool becomes an Exception. The tool is stopped at inv.TimeoutSeconds, or earlier
// when ctx ends (the runner itself is terminated); either is reported as a Timeout.
func Run(ctx context.Context, cfg Config, invocationJSON []byte) (res protocol.Result) {
	if cfg.WorkspaceRoot == "" {
		cfg.WorkspaceRoot = workspace.Root
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	if cfg.KillGrace <= 0 {
		cfg.KillGrace = DefaultKillGrace
	}
	if cfg.RootProbeDir == "" {
		cfg.RootProbeDir = "/"
	}
	start := time.Now()
	res.UID = os.Getuid()
	res.ReadOnlyRoot = rootIsReadOnly(cfg.RootProbeDir)

	var out *output
	var finished time.Time
	defer func() {
		if p := recover(); p != nil {
			res.ErrorKind = protocol.KindException
			res.ExitCode = 1
			res.Message = fmt.Sprintf("runner panicked: %v\n%s", p, debug.Stack())
		}
		if finished.IsZero() {
			finished = time.Now()
		}
		res.DurationMs = finished.Sub(start).Milliseconds()
	}()

	inv, err := decodeInvocation(invocationJSON)
	if err != nil {
		fail(&res, err)
		return res
	}
	tool, ok := toolFuncs[inv.Tool]
	if !ok {
		fail(&res, exceptionf("tool %q is not a built-in tool; the runner knows bash, read_file, write_file, edit_file, glob, grep and list_dir", inv.Tool))
		return res
	}
	ws, err := OpenWorkspace(cfg.WorkspaceRoot)
	if err != nil {
		fail(&res, exceptionf("cannot open the workspace: %v", err))
		return res
	}
	defer func() { _ = ws.Close() }()
	// Before anything is written or run: a call whose walls do not hold runs nothing.
	wallsStart := time.Now()
	err = proveWalls(ctx, cfg.walls(), inv, ws)
	res.WallCheckMs = time.Since(wallsStart).Milliseconds()
	if err != nil {
		fail(&res, err)
		return res
	}

	out = newOutput(cfg.Log)
	var artifact *os.File
	var artifactRel, skipped string
	if inv.Walls.NoOutputCopy {
		skipped = "a Result rule may act on this output, so it is not copied into the workspace (a later call could read the copy); it is only in the container log"
	} else {
		artifact, artifactRel, skipped = openArtifact(ws, inv.ExecutionName)
	}
	if artifact != nil {
		out.artifact = artifact
		defer func() { _ = artifact.Close() }()
		res.ArtifactPath = artifactRel
	}
	res.ArtifactSkipped = skipped

	ic := &invocationContext{inv: inv, ws: ws, out: out, cfg: cfg, res: &res, done: func() {
		if finished.IsZero() {
			finished = time.Now()
		}
	}}
	// The deferred fill runs after a panic is recovered too, so counts and hash
	// always describe what was written.
	defer out.fill(&res, inv.MaxOutputBytes)

	ctx, cancel := context.WithTimeoutCause(ctx, time.Duration(inv.TimeoutSeconds)*time.Second, errTimedOut)
	defer cancel()
	err = tool(ctx, ic)
	ic.done()
	if err != nil {
		fail(&res, err)
	}
	return res
}

// fail records err in r; a tool that already set an exit code keeps it.
func fail(r *protocol.Result, err error) {
	r.ErrorKind = errorKind(err)
	r.Message = err.Error()
	if r.ExitCode == 0 {
		r.ExitCode = 1
	}
}

// decodeInvocation parses and checks the Invocation. Unknown fields are refused, so a
// controller newer than its runner fails loudly rather than being half obeyed.
func decodeInvocation(data []byte) (protocol.Invocation, error) {
	var inv protocol.Invocation
	if len(bytes.TrimSpace(data)) == 0 {
		return inv, exceptionf("no invocation: the environment variable %s is empty or unset", protocol.InvocationEnv)
	}
	if err := strictUnmarshal(data, &inv); err != nil {
		return inv, exceptionf("invocation in %s is not valid: %v", protocol.InvocationEnv, err)
	}
	switch {
	case !executionNameRE.MatchString(inv.ExecutionName):
		return inv, exceptionf("invocation field executionName %q is not a valid Execution name (lowercase letters, digits, '-' and '.')", inv.ExecutionName)
	case inv.TimeoutSeconds <= 0:
		return inv, exceptionf("invocation field timeoutSeconds must be positive, got %d", inv.TimeoutSeconds)
	case inv.MaxOutputBytes <= 0:
		return inv, exceptionf("invocation field maxOutputBytes must be positive, got %d", inv.MaxOutputBytes)
	case len(inv.Input) == 0:
		return inv, exceptionf("invocation field input is missing")
	}
	return inv, nil
}

// decodeInput parses the tool's input into v, refusing unknown fields.
func decodeInput(ic *invocationContext, v any) error {
	if err := strictUnmarshal(ic.inv.Input, v); err != nil {
		return exceptionf("input of %s is not valid: %v", ic.inv.Tool, err)
	}
	return nil
}

func strictUnmarshal(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// rootIsReadOnly reports whether creating a file in dir fails, as evidence that the
// container's root filesystem is read-only (or at least not writable by this user).
func rootIsReadOnly(dir string) bool {
	f, err := os.CreateTemp(dir, ".toolgate-probe-*")
	if err != nil {
		return true
	}
	_ = f.Close()
	_ = os.Remove(f.Name())
	return false
}
