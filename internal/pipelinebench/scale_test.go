//go:build pipelinebench

package pipelinebench

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/testenv"
	"github.com/toolgate/toolgate/internal/testing/pgtest"
)

// maxAgents bounds the agents of (7) that propose at the same time.
const maxAgents = 100

// buildManager builds cmd/manager, as released (no build tags), into a temporary
// directory and returns the binary's path.
func buildManager(t *testing.T) string {
	t.Helper()
	bin, err := testenv.BuildManager(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// scaleResult is what (7) measured.
type scaleResult struct {
	tasks, perTask int
	legs           int
	elapsed        time.Duration // first create to last observation
	all            []time.Duration
	first, last    []time.Duration // each task's first and last tenth, all tasks
	firstN         int             // positions in a tenth
	mem            []memory        // after the first leg, and after the last
	retention      time.Duration   // the controller's --call-retention
	leftInEtcd     int             // intents still in the cluster after the last leg
	rows           int             // call records in the archive once it drained
	lagP50, lagP99 float64         // observation -> record stored, seconds (its histogram)
}

// memory is the controller's memory after calls intents.
type memory struct {
	calls      int
	rss, hwm   uint64  // the controller process's VmRSS and VmHWM
	heapInuse  float64 // from its metrics endpoint
	heapAlloc  float64
	heapLive   float64 // heap alloc after a forced collection
	processRSS float64
}

func (r scaleResult) print(w io.Writer) {
	n := r.tasks * r.perTask * r.legs
	fmt.Fprintf(w, "| (7) %d intents over %d tasks, cmd/manager as its own process with the archive (a real PostgreSQL) and --call-retention=%s: %d agents at once, each proposing its task's %d calls one after the other (the next once it saw the last one's observation), in %d legs of %d per task | %s to the last observation, %.1f intents/s |\n",
		n, r.tasks, r.retention, min(r.tasks, maxAgents), r.perTask*r.legs, r.legs, r.perTask, r.elapsed.Round(time.Millisecond), float64(n)/r.elapsed.Seconds())
	fmt.Fprintf(w, "| (7) intent -> Job, all %d: p50 / p99 | %s / %s |\n", len(r.all), ms(pct(r.all, 50)), ms(pct(r.all, 99)))
	for _, m := range r.mem {
		fmt.Fprintf(w, "| (7) after %d intents: controller RSS now (VmRSS) / peak (VmHWM) | %s / %s |\n", m.calls, mib(m.rss), mib(m.hwm))
		fmt.Fprintf(w, "| (7) after %d intents: Go heap in use / alloc (no forced GC); process_resident_memory_bytes; heap alloc after a forced GC | %s / %s; %s; %s |\n",
			m.calls, mibf(m.heapInuse), mibf(m.heapAlloc), mibf(m.processRSS), mibf(m.heapLive))
	}
	if len(r.mem) == 2 {
		fmt.Fprintf(w, "| (7) RSS after %d / after %d intents | %.2fx |\n", r.mem[1].calls, r.mem[0].calls, float64(r.mem[1].rss)/float64(max(r.mem[0].rss, 1)))
	}
	window := float64(n) / r.elapsed.Seconds() * r.retention.Seconds()
	fmt.Fprintf(w, "| (7) intents left in etcd after the last observation (the retention window holds about %.0f at this rate) | %d |\n", window, r.leftInEtcd)
	fmt.Fprintf(w, "| (7) call records in the archive, once drained (rows = calls) | %d of %d |\n", r.rows, n)
	fmt.Fprintf(w, "| (7) archive lag, observation -> record stored: p50 / p99 (from its histogram's buckets) | %.2f s / %.2f s |\n", r.lagP50, r.lagP99)
	fmt.Fprintf(w, "| (7) each task's first 10%% (%d intents) -> Job, mean / p50 | %s / %s |\n", len(r.first), ms(mean(r.first)), ms(pct(r.first, 50)))
	fmt.Fprintf(w, "| (7) each task's last 10%% (%d intents) -> Job, mean / p50 | %s / %s (%.2fx the first 10%%'s mean) |\n",
		len(r.last), ms(mean(r.last)), ms(pct(r.last, 50)), ratio(mean(r.last), mean(r.first)))
}

// benchCallRetention is the controller's --call-retention in (7): short, so that
// the phase's minutes hold many windows.
const benchCallRetention = 30 * time.Second

// scale is (7): it stops the in-process manager, runs cmd/manager as its own
// process with the archive in a real PostgreSQL, and has one agent per task (at
// most maxAgents at once) propose perTask calls in sequence, each once it saw the
// last one's observation, legs times over. The controller's memory is measured
// after the first leg and after the last: flat, it does not grow with the
// history, which the archive holds and retention takes out of the cluster. The
// harness plays the kubelet throughout.
func (b *bench) scale(t *testing.T, env *testenv.Env, bin string, tasks, perTask, legs int) scaleResult {
	t.Helper()
	// Two controllers must never reconcile the same objects.
	b.stopMgr(t)
	if t.Failed() {
		t.FailNow()
	}
	// The controller process caches every namespace: what the in-process phases left
	// behind would be in its numbers. No finalizers hold these, and envtest runs no
	// garbage collector.
	b.clearNamespace(t, b.ns)

	dir := t.TempDir()
	kubeconfig, err := env.AdminKubeconfig("pipelinebench-admin", dir)
	if err != nil {
		t.Fatal(err)
	}
	pg, err := pgtest.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pg.Close() })
	dsn := pg.NewDatabase(t)
	dsnFile := filepath.Join(dir, "archive-dsn")
	if err := os.WriteFile(dsnFile, []byte(dsn), 0o600); err != nil {
		t.Fatal(err)
	}
	metricsAddr, pprofAddr := freeAddr(t), freeAddr(t)
	p := startManager(t, bin, kubeconfig, metricsAddr, pprofAddr, filepath.Join(dir, "manager.log"),
		"--archive-dsn-file="+dsnFile, "--call-retention="+benchCallRetention.String())
	defer p.stop(t)

	ctx, cancel := context.WithCancelCause(t.Context())
	defer cancel(nil)
	go func() {
		select {
		case <-p.exited:
			cancel(fmt.Errorf("the manager process exited: %v\n%s", p.err, p.tail()))
		case <-ctx.Done():
		}
	}()
	if err := waitMetrics(ctx, metricsAddr); err != nil {
		t.Fatalf("the manager's metrics endpoint: %v (%v)\n%s", err, context.Cause(ctx), p.tail())
	}

	names := make([]string, tasks)
	for i := range names {
		names[i] = fmt.Sprintf("agent-%03d", i)
		b.createTask(t, b.scaleNS, names[i], perTask*legs)
	}
	if err := b.waitTasksReconciled(ctx, names); err != nil {
		t.Fatalf("%v (%v)", err, context.Cause(ctx))
	}
	time.Sleep(2 * time.Second) // the tasks' first reconciles settle
	b.kubelet(ctx, 6)           // 8 in all: the phase has up to maxAgents Jobs at once

	r := scaleResult{tasks: tasks, perTask: perTask, legs: legs, firstN: max(perTask*legs/10, 1), retention: benchCallRetention}
	lat := make([][]time.Duration, tasks)
	start := time.Now()
	for leg := range legs {
		b.runLeg(ctx, cancel, names, perTask, lat)
		if err := context.Cause(ctx); err != nil {
			t.Fatal(err)
		}
		if leg == 0 || leg == legs-1 {
			r.mem = append(r.mem, measure(ctx, t, p, metricsAddr, pprofAddr, tasks*perTask*(leg+1)))
		}
	}
	r.elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		t.Fatal(err)
	}
	var left v1.ToolIntentList
	if err := b.c.List(ctx, &left, client.InNamespace(b.scaleNS)); err != nil {
		t.Fatal(err)
	}
	r.leftInEtcd = len(left.Items)
	if r.rows, err = waitArchived(ctx, dsn, tasks*perTask*legs); err != nil {
		t.Fatalf("the archive: %v", err)
	}
	if r.lagP50, r.lagP99, err = lagQuantiles(ctx, metricsAddr); err != nil {
		t.Fatalf("the archive's lag: %v", err)
	}
	for _, d := range lat {
		r.all = append(r.all, d...)
		r.first = append(r.first, d[:r.firstN]...)
		r.last = append(r.last, d[len(d)-r.firstN:]...)
	}
	last := r.mem[len(r.mem)-1]
	t.Logf("scale: %d intents in %s; controller RSS %s (peak %s), heap in use %s; %d intents left in etcd; %d records; last 10%% / first 10%% mean %.2fx",
		tasks*perTask*legs, r.elapsed.Round(time.Millisecond), mib(last.rss), mib(last.hwm), mibf(last.heapInuse), r.leftInEtcd, r.rows, ratio(mean(r.last), mean(r.first)))
	return r
}

// runLeg has each task's agent propose perTask more calls, at most maxAgents at
// once, appending each call's create -> Job latency to lat.
func (b *bench) runLeg(ctx context.Context, cancel context.CancelCauseFunc, names []string, perTask int, lat [][]time.Duration) {
	work := make(chan int, len(names))
	for i := range names {
		work <- i
	}
	close(work)
	var wg sync.WaitGroup
	for range min(len(names), maxAgents) {
		wg.Go(func() {
			for i := range work {
				d, err := b.agent(ctx, names[i], perTask)
				lat[i] = append(lat[i], d...)
				if err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// measure reads the controller's memory after calls intents.
func measure(ctx context.Context, t *testing.T, p *managerProcess, metricsAddr, pprofAddr string, calls int) memory {
	t.Helper()
	m := memory{calls: calls}
	pid := strconv.Itoa(p.cmd.Process.Pid)
	m.rss, m.hwm = procStatus(pid, "VmRSS"), procStatus(pid, "VmHWM")
	got, err := scrape(ctx, metricsAddr)
	if err != nil {
		t.Fatalf("the manager's metrics: %v", err)
	}
	m.heapInuse, m.heapAlloc, m.processRSS = got["go_memstats_heap_inuse_bytes"], got["go_memstats_heap_alloc_bytes"], got["process_resident_memory_bytes"]
	// The heap after a collection (the pprof endpoint's gc=1 runs one first): what
	// the controller holds, not what it has yet to collect. With
	// TOOLGATE_BENCH_HEAPPROFILE set, the last profile is kept there for go tool
	// pprof.
	if profile, err := fetch(ctx, "http://"+pprofAddr+"/debug/pprof/heap?gc=1"); err != nil {
		t.Fatalf("the manager's heap profile: %v", err)
	} else if path := os.Getenv("TOOLGATE_BENCH_HEAPPROFILE"); path != "" {
		if err := os.WriteFile(path, profile, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if got, err = scrape(ctx, metricsAddr); err != nil {
		t.Fatalf("the manager's metrics: %v", err)
	}
	m.heapLive = got["go_memstats_heap_alloc_bytes"]
	t.Logf("after %d intents: RSS %s (peak %s), heap after GC %s", calls, mib(m.rss), mib(m.hwm), mibf(m.heapLive))
	return m
}

// waitArchived waits until the archive at dsn holds want call records (the
// archiver drains its backlog after the last observation) and returns how many
// it holds; it fails when more are stored than calls were made.
func waitArchived(ctx context.Context, dsn string, want int) (int, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM records WHERE kind = 'Call'`).Scan(&n); err != nil {
			return 0, err
		}
		switch {
		case n > want:
			return n, fmt.Errorf("%d call records for %d calls: one was stored twice", n, want)
		case n == want:
			return n, nil
		case time.Now().After(deadline):
			return n, fmt.Errorf("%d call records of %d calls after 5 minutes", n, want)
		}
		select {
		case <-ctx.Done():
			return n, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// lagQuantiles estimates the archive lag's p50 and p99 from the controller's
// toolgate_archive_lag_seconds histogram, by linear interpolation in the bucket
// that holds each quantile.
func lagQuantiles(ctx context.Context, addr string) (p50, p99 float64, err error) {
	body, err := fetch(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return 0, 0, err
	}
	type bucket struct{ le, count float64 }
	var buckets []bucket
	for _, line := range strings.Split(string(body), "\n") {
		rest, ok := strings.CutPrefix(line, `toolgate_archive_lag_seconds_bucket{le="`)
		if !ok {
			continue
		}
		le, count, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		b := bucket{}
		if b.le, err = strconv.ParseFloat(le, 64); err != nil {
			b.le = math.Inf(1)
		}
		if b.count, err = strconv.ParseFloat(strings.TrimSpace(count), 64); err != nil {
			return 0, 0, fmt.Errorf("bucket %q: %w", line, err)
		}
		buckets = append(buckets, b)
	}
	if len(buckets) == 0 || buckets[len(buckets)-1].count == 0 {
		return 0, 0, fmt.Errorf("no archive lag was observed")
	}
	total := buckets[len(buckets)-1].count
	q := func(f float64) float64 {
		rank, lo, below := f*total, 0.0, 0.0
		for _, b := range buckets {
			if b.count >= rank {
				if math.IsInf(b.le, 1) {
					return lo
				}
				return lo + (b.le-lo)*(rank-below)/max(b.count-below, 1)
			}
			lo, below = b.le, b.count
		}
		return lo
	}
	return q(0.5), q(0.99), nil
}

// agent proposes perTask calls to task one after the other, each once the last one
// is observed, and returns each one's create -> Job latency by its position.
func (b *bench) agent(ctx context.Context, task string, perTask int) ([]time.Duration, error) {
	out := make([]time.Duration, 0, perTask)
	for range perTask {
		in := b.newIntent(task, true)
		start := time.Now()
		if err := b.c.Create(ctx, in); err != nil {
			return out, fmt.Errorf("intent %s: %w", in.Name, err)
		}
		seen, err := b.jobs.waitFor(ctx, in.Name, waitLimit)
		if err != nil {
			return out, fmt.Errorf("intent %s: no Job: %w", in.Name, err)
		}
		out = append(out, seen.Sub(start))
		if _, err := b.done.waitFor(ctx, in.Name, waitLimit); err != nil {
			return out, fmt.Errorf("intent %s: not observed: %w", in.Name, err)
		}
	}
	return out, nil
}

// clearNamespace deletes what the controller caches from ns.
func (b *bench) clearNamespace(t *testing.T, ns string) {
	t.Helper()
	opts := []client.DeleteAllOfOption{client.InNamespace(ns), client.GracePeriodSeconds(0)}
	for _, obj := range []client.Object{
		&v1.ToolIntent{}, &v1.Execution{}, &v1.Approval{}, &v1.AgentTask{},
		&batchv1.Job{}, &corev1.Pod{}, &networkingv1.NetworkPolicy{}, &corev1.PersistentVolumeClaim{},
	} {
		if err := b.c.DeleteAllOf(t.Context(), obj, opts...); err != nil {
			t.Fatalf("clearing %s of %T: %v", ns, obj, err)
		}
	}
}

// waitTasksReconciled waits until the controller has written a status on each task.
func (b *bench) waitTasksReconciled(ctx context.Context, names []string) error {
	deadline := time.Now().Add(waitLimit)
	for {
		var list v1.AgentTaskList
		if err := b.c.List(ctx, &list, client.InNamespace(b.scaleNS)); err != nil {
			return err
		}
		done := 0
		for i := range list.Items {
			if list.Items[i].Status.Phase != "" || len(list.Items[i].Status.Conditions) > 0 {
				done++
			}
		}
		if done == len(names) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d tasks reconciled after %s", done, len(names), waitLimit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeAddr returns a loopback address with a port free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

// waitMetrics waits until the metrics endpoint at addr answers.
func waitMetrics(ctx context.Context, addr string) error {
	deadline := time.Now().Add(waitLimit)
	for {
		_, err := scrape(ctx, addr)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// fetch GETs url and returns its body.
func fetch(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// scrape reads the unlabelled samples of the Prometheus text at addr's /metrics.
func scrape(ctx context.Context, addr string) (map[string]float64, error) {
	body, err := fetch(ctx, "http://"+addr+"/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 || strings.HasPrefix(f[0], "#") || strings.Contains(f[0], "{") {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			out[f[0]] = v
		}
	}
	return out, sc.Err()
}

// managerProcess is cmd/manager running as a subprocess, its log in a file.
type managerProcess struct {
	cmd     *exec.Cmd
	logPath string
	log     *os.File
	exited  chan struct{}
	err     error // cmd.Wait's result, set before exited is closed
	once    sync.Once
}

// startManager runs the manager binary against the kubeconfig, with its metrics on
// metricsAddr, no probes, and the bench's images. The test's end stops it, if
// nothing did before.
func startManager(t *testing.T, bin, kubeconfig, metricsAddr, pprofAddr, logPath string, flags ...string) *managerProcess {
	t.Helper()
	log, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--metrics-bind-address=" + metricsAddr, "--health-probe-bind-address=0", "--pprof-bind-address=" + pprofAddr,
		"--runner-image=" + runnerImage, "--default-sandbox-image=" + sandboxImage}, flags...)
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KUBECONFIG=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "KUBECONFIG="+kubeconfig)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		t.Fatalf("starting the manager: %v", err)
	}
	p := &managerProcess{cmd: cmd, logPath: logPath, log: log, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stop ends the process as Kubernetes ends a pod (SIGTERM, then SIGKILL after 30
// seconds) and fails the test when its log reports a panic.
func (p *managerProcess) stop(t *testing.T) {
	t.Helper()
	p.once.Do(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				t.Log("the manager process outlived SIGTERM by 30s; killing it")
				_ = p.cmd.Process.Kill()
				<-p.exited
			}
		}
		_ = p.log.Close()
		panics, err := p.panics()
		if err != nil {
			t.Errorf("reading the manager's log: %v", err)
		}
		for _, line := range panics {
			t.Errorf("the manager process panicked: %s", line)
		}
	})
}

// panics returns the lines of the process's log that report a panic (a recovered
// one in a reconciler included), the first 20.
func (p *managerProcess) panics() ([]string, error) {
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() && len(out) < 20 {
		if strings.Contains(sc.Text(), "panic") {
			out = append(out, sc.Text())
		}
	}
	return out, sc.Err()
}

// tail is the end of the process's log, for a failure message.
func (p *managerProcess) tail() string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return err.Error()
	}
	s := string(data)
	if len(s) > 4000 {
		s = "…" + s[len(s)-4000:]
	}
	return s
}

func mibf(n float64) string { return fmt.Sprintf("%.1f MiB", n/(1<<20)) }
