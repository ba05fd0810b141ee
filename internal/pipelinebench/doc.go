// Package pipelinebench measures the whole toolgate pipeline on envtest: the real
// controller runs in-process against a real kube-apiserver and etcd, and the test in
// pipeline_test.go (build tag pipelinebench, run by `make bench-pipeline`) prints the
// latency of an allowed intent to its Job against a direct Job create, burst
// throughput, API writes per intent (before its Job and over its whole life, with
// and without an owner reference), the test process's heap, and how a task's cost
// grows with its history. Its last phase (scale_test.go) stops that controller and
// runs cmd/manager as its own process for many tasks with long sequences of calls,
// and reads that process's memory. It is a measurement, never a timed assertion:
// `make test` does not build it, and it fails only when the pipeline does not work
// at all.
//
// See docs/benchmarks.md, "Pipeline (envtest, whole controller)".
package pipelinebench
