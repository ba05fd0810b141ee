package executor

import (
	"context"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// LogReader reads a container's log with the semantics of the pods/log subresource:
// TailLines picks the last lines first, then LimitBytes keeps at most that many bytes
// from the start of what is left.
type LogReader interface {
	ReadLog(ctx context.Context, namespace, pod string, opts corev1.PodLogOptions) ([]byte, error)
}

// PodLogReader reads logs through the pods/log subresource of the API server.
type PodLogReader struct {
	Clientset kubernetes.Interface
}

// ReadLog reads the log of opts.Container in pod, never more than opts.LimitBytes.
func (r PodLogReader) ReadLog(ctx context.Context, namespace, pod string, opts corev1.PodLogOptions) ([]byte, error) {
	if opts.LimitBytes == nil {
		return nil, fmt.Errorf("reading the log of pod %s/%s without a byte limit is refused: a tool's output is unbounded", namespace, pod)
	}
	stream, err := r.Clientset.CoreV1().Pods(namespace).GetLogs(pod, &opts).Stream(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = stream.Close() }()
	// The limit is enforced here too, in case a server ignores it.
	return io.ReadAll(io.LimitReader(stream, *opts.LimitBytes))
}

// tailLines is how many lines the first tail read asks for, and tailReadFactor how
// many times the tail budget one tail read may return. A tail read that hits its byte
// limit did not reach the end of the log and is retried with a quarter of the lines.
const (
	tailLines      = 200
	tailReadFactor = 4
)

// ReadOutput reads what the Execution's status shows of the tool container's log.
// total is the log size the runner reported (-1 when unknown). When the log fits in
// maxOutputBytes it is read whole with one bounded request; otherwise a bounded head
// and a bounded tail are read. Read errors are reported in LogText.Err, not returned:
// a missing log must not hide the runner's result.
func ReadOutput(ctx context.Context, logs LogReader, namespace, pod string, total int64, maxOutputBytes int32) LogText {
	text := LogText{Total: total}
	base := corev1.PodLogOptions{Container: ToolContainerName}
	limit := int64(maxOutputBytes)
	if total >= 0 && total <= limit {
		opts := base
		opts.LimitBytes = ptr.To(max(limit, 1))
		head, err := logs.ReadLog(ctx, namespace, pod, opts)
		if err != nil {
			text.Err = fmt.Sprintf("the container log could not be read: %v", err)
		}
		text.Head = head
		return text
	}
	if total < 0 {
		// No result to size the log: read one byte past the cap to see whether it
		// continues.
		opts := base
		opts.LimitBytes = ptr.To(limit + 1)
		head, err := logs.ReadLog(ctx, namespace, pod, opts)
		if err != nil {
			text.Err = fmt.Sprintf("the container log could not be read: %v", err)
		}
		text.Head = head
		return text
	}
	headBudget, tailBudget := Budgets(maxOutputBytes)
	opts := base
	opts.LimitBytes = ptr.To(int64(headBudget))
	head, err := logs.ReadLog(ctx, namespace, pod, opts)
	if err != nil {
		text.Err = fmt.Sprintf("the container log could not be read: %v", err)
		return text
	}
	text.Head = head
	// The pods/log API has no byte tail: ask for the last lines, fewer each time the
	// answer hits its byte limit (which means it stopped before the end).
	opts = base
	opts.LimitBytes = ptr.To(int64(tailBudget) * tailReadFactor)
	for lines := int64(tailLines); ; lines /= 4 {
		opts.TailLines = ptr.To(max(lines, 1))
		tail, err := logs.ReadLog(ctx, namespace, pod, opts)
		if err != nil {
			text.Err = fmt.Sprintf("the end of the container log could not be read: %v", err)
			break
		}
		if int64(len(tail)) < *opts.LimitBytes {
			// The tail must not repeat bytes of the head.
			keep := max(min(int64(len(tail)), total-int64(len(head))), 0)
			text.Tail = tail[int64(len(tail))-keep:]
			break
		}
		if lines <= 1 {
			text.Err = fmt.Sprintf("the end of the container log was not read: its last line alone holds more than %d bytes", *opts.LimitBytes)
			break
		}
	}
	return text
}
