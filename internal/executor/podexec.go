package executor

import (
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
)

// SessionExecutor runs ExecCommand in a session pod's tool container with the given
// streams and returns its exit code. err is set when the exec itself failed (no
// connection, or the stream broke before the process's exit was reported).
type SessionExecutor interface {
	Exec(ctx context.Context, namespace, pod string, stdin io.Reader, stdout, stderr io.Writer) (exitCode int32, err error)
}

// NeverOpened reports whether an exec's error came before its stream opened: the API
// server or the kubelet refused it (the pod is gone, admission refused the exec, the
// container is not running), so the command never started.
func NeverOpened(err error) bool {
	return httpstream.IsUpgradeFailure(err) || apierrors.IsNotFound(err) || apierrors.IsForbidden(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsUnauthorized(err)
}

// PodExec is the SessionExecutor of a cluster: the pods/exec subresource through the
// API server, which the kubelet authenticates; WebSocket first, SPDY for servers
// that do not speak it (as kubectl does).
type PodExec struct {
	Config    *rest.Config
	Clientset kubernetes.Interface
}

// Exec runs ExecCommand in pod through the API server.
func (p PodExec) Exec(ctx context.Context, namespace, pod string, stdin io.Reader, stdout, stderr io.Writer) (int32, error) {
	req := p.Clientset.CoreV1().RESTClient().Post().Namespace(namespace).Resource("pods").Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{
			Container: ToolContainerName,
			Command:   ExecCommand,
			Stdin:     true,
			Stdout:    true,
			Stderr:    true,
		}, scheme.ParameterCodec)
	websocket, err := remotecommand.NewWebSocketExecutor(p.Config, "GET", req.URL().String())
	if err != nil {
		return 0, fmt.Errorf("preparing the exec into session pod %s: %w", pod, err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(p.Config, "POST", req.URL())
	if err != nil {
		return 0, fmt.Errorf("preparing the exec into session pod %s: %w", pod, err)
	}
	exe, err := remotecommand.NewFallbackExecutor(websocket, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, err
	}
	err = exe.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdin, Stdout: stdout, Stderr: stderr})
	var exited utilexec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exited):
		return int32(exited.ExitStatus()), nil
	default:
		return 0, err
	}
}
