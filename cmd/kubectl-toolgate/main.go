// Command kubectl-toolgate is the kubectl plugin `kubectl toolgate`: trace, replay,
// approve, deny and propose the tool calls toolgate governs, and check policies
// offline. Put it on PATH and run `kubectl toolgate --help`. The commands live in
// internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/toolgate/toolgate/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr})
	stop()
	os.Exit(code)
}
