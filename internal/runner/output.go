package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/toolgate/toolgate/internal/protocol"
)

// ArtifactDir is the folder (relative to the workspace) that keeps each
// execution's full output; it holds a .gitignore that ignores everything.
const ArtifactDir = ".toolgate/executions"

// output is the tool's combined output stream. Every byte goes, in the order written,
// to the runner's stdout (the container log), to the artifact file when there is one,
// and into a SHA-256; bytes are counted per stream. Nothing is dropped here: the cap
// (MaxOutputBytes) applies to what the controller shows, not to the log or artifact.
type output struct {
	mu       sync.Mutex
	log      io.Writer
	artifact *os.File
	// artifactErr is set when writing the artifact failed; it stops further writes.
	artifactErr error
	sum         hash.Hash
	stdout      int64
	stderr      int64
}

func newOutput(log io.Writer) *output {
	return &output{log: log, sum: sha256.New()}
}

// write appends p, counted as stderr when toStderr is set.
func (o *output) write(p []byte, toStderr bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if toStderr {
		o.stderr += int64(len(p))
	} else {
		o.stdout += int64(len(p))
	}
	o.sum.Write(p)
	// A failed log write cannot be reported anywhere but the result, where the
	// hash lets the controller notice an incomplete log.
	_, _ = o.log.Write(p)
	if o.artifact != nil && o.artifactErr == nil {
		if _, err := o.artifact.Write(p); err != nil {
			o.artifactErr = err
		}
	}
}

// printf writes formatted text as stdout.
func (o *output) printf(format string, args ...any) {
	o.write(fmt.Appendf(nil, format, args...), false)
}

// stream is an io.Writer for one of the tool's streams.
type stream struct {
	out      *output
	toStderr bool
}

func (s stream) Write(p []byte) (int, error) {
	s.out.write(p, s.toStderr)
	return len(p), nil
}

// stdoutWriter and stderrWriter return writers for the tool's two streams.
func (o *output) stdoutWriter() io.Writer { return stream{out: o} }
func (o *output) stderrWriter() io.Writer { return stream{out: o, toStderr: true} }

// fill copies the stream's facts into r.
func (o *output) fill(r *protocol.Result, maxOutputBytes int32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	r.StdoutBytes = o.stdout
	r.StderrBytes = o.stderr
	r.OutputSHA256 = hex.EncodeToString(o.sum.Sum(nil))
	r.Truncated = protocol.Truncated(o.stdout+o.stderr, maxOutputBytes)
	if o.artifactErr != nil {
		r.ArtifactSkipped = fmt.Sprintf("the copy in the workspace is incomplete (%v); the container log has the full output", o.artifactErr)
	}
}

// HeadTail keeps at most maxBytes of out for display: the first and last halves,
// cut at UTF-8 boundaries, and the number of bytes omitted between them. When out fits,
// head is out and tail is empty. Callers must say that omitted bytes were cut.
func HeadTail(out []byte, maxBytes int) (head, tail []byte, omitted int) {
	if maxBytes < 0 {
		maxBytes = 0
	}
	if len(out) <= maxBytes {
		return out, nil, 0
	}
	headLen := maxBytes / 2
	tailLen := maxBytes - headLen
	// Back off to rune starts so neither part begins or ends inside a character.
	for headLen > 0 && !utf8.RuneStart(out[headLen]) {
		headLen--
	}
	tailStart := len(out) - tailLen
	for tailStart < len(out) && !utf8.RuneStart(out[tailStart]) {
		tailStart++
	}
	return out[:headLen], out[tailStart:], tailStart - headLen
}

// openArtifact creates <ArtifactDir>/<executionName>/output.log in the workspace, and
// .toolgate/.gitignore ignoring everything, all through confined descriptors. It
// returns the artifact's path relative to the workspace, or why it was skipped.
func openArtifact(w *Workspace, executionName string) (f *os.File, rel string, skipped string) {
	dir := path.Join(ArtifactDir, executionName)
	rel = path.Join(dir, "output.log")
	if err := w.mkdirAll(dir, dir); err != nil {
		return nil, "", artifactSkipReason(err)
	}
	top := path.Dir(ArtifactDir) // .toolgate
	gi := path.Join(top, ".gitignore")
	if fd, err := w.open(gi, gi, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o644); err == nil {
		_, _ = unix.Write(fd, []byte("*\n"))
		_ = unix.Close(fd)
	}
	fd, err := w.open(rel, rel, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW, 0o644)
	if err != nil {
		return nil, "", artifactSkipReason(err)
	}
	return os.NewFile(uintptr(fd), filepath.Join(w.Root, rel)), rel, ""
}

func artifactSkipReason(err error) string {
	if errors.Is(err, unix.EROFS) || errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
		return "the workspace is not writable (read-only mount), so the full output is only in the container log"
	}
	return fmt.Sprintf("the full output could not be copied into the workspace (%v); it is only in the container log", err)
}
