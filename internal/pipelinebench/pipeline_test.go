//go:build pipelinebench

package pipelinebench

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/testenv"
)

var (
	burstIntents = flag.Int("pipelinebench.intents", envInt("TOOLGATE_BENCH_INTENTS", 1000), "intents in the burst, spread over 10 tasks")
	growIntents  = flag.Int("pipelinebench.grow", envInt("TOOLGATE_BENCH_GROW", 200), "intents of the one task whose first and last tenth are compared")
	latencyRuns  = flag.Int("pipelinebench.latency", 100, "sequential direct Job creates and intents, interleaved")
	writeRuns    = flag.Int("pipelinebench.writes", 20, "intents whose API writes are counted, one at a time on a quiet controller")
	unownedRuns  = flag.Int("pipelinebench.unowned", 5, "intents created without an owner reference whose API writes are counted as well")
	scaleTasks   = flag.Int("pipelinebench.tasks", envInt("TOOLGATE_BENCH_TASKS", 100), "tasks of the phase with the controller as its own process (0 skips it)")
	scalePerTask = flag.Int("pipelinebench.pertask", envInt("TOOLGATE_BENCH_PERTASK", 100), "sequential intents of each of those tasks, per leg")
	scaleLegs    = flag.Int("pipelinebench.legs", envInt("TOOLGATE_BENCH_LEGS", 3), "legs of that phase: the controller's memory is measured after the first and after the last")
)

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

const (
	proposer     = "agent-bench"
	runnerImage  = "example.test/toolgate/runner:bench"
	sandboxImage = "example.test/toolgate/workspace:bench"
	allowedInput = `{"command":"ls"}` // read-only: allowed without any policy
	waitLimit    = 2 * time.Minute    // a pipeline that takes longer is broken, not slow
)

// TestPipeline runs every measurement on one control plane and one controller, and
// prints the table docs/benchmarks.md records.
func TestPipeline(t *testing.T) {
	ctrl.SetLogger(zap.New(zap.WriteTo(io.Discard)))
	scaling := *scaleTasks > 0 && *scalePerTask > 0
	var managerBin string
	if scaling {
		// Built before anything is measured, so the compiler takes no CPU from a phase.
		managerBin = buildManager(t)
	}
	env, err := testenv.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	b := newBench(t, env)

	// Warm up: caches, connections, the policy cache, the first-use code paths.
	for i := range 5 {
		b.directJob(t, fmt.Sprintf("warm-%d", i))
		b.intent(t, "lat-0", true)
	}

	// (1) and (2): a direct Job create and an intent to its Job, interleaved.
	var direct, viaIntent, freshLists []time.Duration
	for i := range *latencyRuns {
		direct = append(direct, b.directJob(t, fmt.Sprintf("direct-%d", i)))
		viaIntent = append(viaIntent, b.intent(t, fmt.Sprintf("lat-%d", i%10), true))
	}
	// (1b) on its own: a consistent LIST just before an intent would make the
	// intent's own decision wait for the next progress notification.
	for i := range *latencyRuns {
		b.directJob(t, fmt.Sprintf("direct-list-%d", i))
		freshLists = append(freshLists, b.freshList(t))
	}

	// (4): the writes before an allowed intent's Job exists, one intent at a time on
	// a quiet controller, its pod finished only after the count.
	t.Logf("latency: direct p50 %s, intent p50 %s", ms(pct(direct, 50)), ms(pct(viaIntent, 50)))
	writes := b.countWrites(t, *writeRuns, true)
	t.Logf("writes per owned intent: %.2f before its Job, %.2f over its life", writes.total, writes.life)
	unowned := b.countWrites(t, *unownedRuns, false)
	t.Logf("writes per unowned intent: %.2f before its Job, %.2f over its life", unowned.total, unowned.life)

	// (3) and (5): a burst over 10 tasks, then the heap.
	burstElapsed := b.burst(t, *burstIntents)
	heapAtJobs := heap()
	t.Logf("burst: %s to all Jobs", burstElapsed)
	drained := b.waitAllObserved(t, 3*time.Minute)
	heapDrained := heap()

	// (6): one task's sequence, its first tenth against its last.
	var grow []time.Duration
	for range *growIntents {
		grow = append(grow, b.intent(t, "grow", true))
	}

	// (7): the controller as its own process, many tasks each with a long sequence.
	var sc scaleResult
	if scaling {
		sc = b.scale(t, env, managerBin, *scaleTasks, *scalePerTask, max(*scaleLegs, 1))
	}

	// The table.
	w := os.Stdout
	dp50, dp99 := pct(direct, 50), pct(direct, 99)
	ip50, ip99 := pct(viaIntent, 50), pct(viaIntent, 99)
	fmt.Fprintf(w, "\n== toolgate pipeline benchmark (envtest; (1)-(6) the whole controller in-process, (7) cmd/manager as its own process) ==\n")
	fmt.Fprintf(w, "machine: %d CPUs, %s %s/%s\n\n", runtime.NumCPU(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(w, "| what | p50 | p99 | ratio to the floor (p50 / p99) |\n|---|---|---|---|\n")
	fmt.Fprintf(w, "| (1) floor: direct Job create -> seen by a watch (%d sequential) | %s | %s | 1 |\n", len(direct), ms(dp50), ms(dp99))
	fmt.Fprintf(w, "| (1b) a consistent LIST of the namespace's ToolPolicies right after that create (what a decision from fresh policies waits for) | %s | %s | %.1fx / %.1fx |\n",
		ms(pct(freshLists, 50)), ms(pct(freshLists, 99)), ratio(pct(freshLists, 50), dp50), ratio(pct(freshLists, 99), dp99))
	fmt.Fprintf(w, "| (2) ToolIntent create (allowed `ls`) -> its Job seen (%d, interleaved) | %s | %s | %.1fx / %.1fx |\n",
		len(viaIntent), ms(ip50), ms(ip99), ratio(ip50, dp50), ratio(ip99, dp99))
	fmt.Fprintf(w, "\n| what | value |\n|---|---|\n")
	fmt.Fprintf(w, "| (3) burst: %d intents over 10 tasks -> all Jobs seen | %s, %.1f intents/s |\n",
		*burstIntents, burstElapsed.Round(time.Millisecond), float64(*burstIntents)/burstElapsed.Seconds())
	fmt.Fprintf(w, "| (3') burst drained (all intents observed) | %s after the last Job |\n", drained.Round(time.Millisecond))
	fmt.Fprintf(w, "| (5) in-process (controller + harness) heap after GC, all burst Jobs seen | %s in use (%s alloc), RSS %s |\n", mib(heapAtJobs.inuse), mib(heapAtJobs.alloc), mib(heapAtJobs.rss))
	fmt.Fprintf(w, "| (5') in-process (controller + harness) heap after GC, burst drained | %s in use (%s alloc), RSS %s |\n", mib(heapDrained.inuse), mib(heapDrained.alloc), mib(heapDrained.rss))
	first, last := tenth(grow, false), tenth(grow, true)
	fmt.Fprintf(w, "| (6) one task, %d sequential intents: first tenth -> Job mean / p50 | %s / %s |\n", len(grow), ms(mean(first)), ms(pct(first, 50)))
	fmt.Fprintf(w, "| (6) last tenth -> Job mean / p50 | %s / %s (%.2fx the first tenth's mean) |\n", ms(mean(last)), ms(pct(last, 50)), ratio(mean(last), mean(first)))
	if scaling {
		sc.print(w)
	}
	printWrites(w, writes, unowned)
	fmt.Fprintf(w, "\n(5) heap and RSS are the test process's: the controller manager, plus the harness's own informer cache (Jobs, ToolIntents) and clients. (7) RSS and heap are the controller process's alone; it starts once the in-process manager has stopped and the earlier phases' objects are deleted, so it holds this phase's objects only. kube-apiserver and etcd run as separate processes and are in neither.\n")
}

// printWrites prints (4): the writes before the Job and over the whole life, of
// intents created with their task as owner and of intents the controller adopts.
func printWrites(w io.Writer, owned, unowned writeCounts) {
	fmt.Fprintf(w, "\n(4) API writes per allowed intent before its Job exists (the Job create included), mean of %d intents created with their task as controller owner (as `kubectl toolgate propose` and the agent loop create them): %.2f; reads (GET/LIST) per intent in the same windows: %.2f\n",
		owned.n, owned.total, owned.reads)
	if unowned.n > 0 {
		fmt.Fprintf(w, "(4) the same for %d intents created without an owner reference (a raw `kubectl create`, which the controller adopts): %.2f writes; %.2f reads\n",
			unowned.n, unowned.total, unowned.reads)
	}
	fmt.Fprintf(w, "(4') API writes per allowed intent over its whole life, from its create until the controller is quiet again after its observation (Execution, intent and task status, events): owned %.2f (%.2f reads)",
		owned.life, owned.lifeReads)
	if unowned.n > 0 {
		fmt.Fprintf(w, ", unowned %.2f (%.2f reads)", unowned.life, unowned.lifeReads)
	}
	fmt.Fprintf(w, "\n\n| write | owned: before the Job | owned: whole life | unowned: before the Job | unowned: whole life |\n|---|---|---|---|---|\n")
	all := map[string]float64{}
	for _, m := range []map[string]float64{owned.byKey, owned.lifeByKey, unowned.byKey, unowned.lifeByKey} {
		for k, v := range m {
			all[k] += v
		}
	}
	for _, k := range sortedKeys(all) {
		fmt.Fprintf(w, "| %s | %.2f | %.2f | %.2f | %.2f |\n", k, owned.byKey[k], owned.lifeByKey[k], unowned.byKey[k], unowned.lifeByKey[k])
	}
}

// bench is the harness: the controller's manager with a counting transport, an
// uncounted client and informer cache for the harness, and the kubelet it plays.
type bench struct {
	ns         string        // the in-process phases'
	scaleNS    string        // the controller process's phase
	c          client.Client // the harness's, uncounted
	counter    *callCounter
	jobs       *marks // Job seen: by intent name for the controller's, by name for direct ones
	done       *marks // intent observed, by name
	autoPod    atomic.Bool
	pods       chan *batchv1.Job
	stopMgr    func(t *testing.T)       // stops the in-process manager and waits until it has
	seq        map[string]int           // task -> next turn
	tasks      map[string]*v1.AgentTask // by name, as created (with their UIDs)
	burstNames []*v1.ToolIntent
	burstEnd   time.Time
	mu         sync.Mutex
}

func newBench(t *testing.T, env *testenv.Env) *bench {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	// The harness's client, without a client-side rate limit.
	hcfg := rest.CopyConfig(env.Config)
	hcfg.QPS, hcfg.Burst = -1, 0
	c, err := client.New(hcfg, client.Options{Scheme: env.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	var nss [2]string
	for i, prefix := range []string{"bench-", "bench-scale-"} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
		if err := c.Create(ctx, ns); err != nil {
			t.Fatal(err)
		}
		nss[i] = ns.Name
	}
	b := &bench{
		ns: nss[0], scaleNS: nss[1], c: c, counter: &callCounter{},
		jobs: newMarks(), done: newMarks(), pods: make(chan *batchv1.Job, 100000),
		seq: map[string]int{}, tasks: map[string]*v1.AgentTask{},
	}
	b.autoPod.Store(true)

	// The harness's informers, on the bench's namespaces only: Jobs seen and intents
	// observed.
	hc, err := cache.New(hcfg, cache.Options{Scheme: env.Scheme, DefaultNamespaces: map[string]cache.Config{b.ns: {}, b.scaleNS: {}}})
	if err != nil {
		t.Fatal(err)
	}
	jobInf, err := hc.GetInformer(ctx, &batchv1.Job{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := jobInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		job, ok := obj.(*batchv1.Job)
		if !ok {
			return
		}
		now := time.Now()
		if intent := job.Labels[v1.LabelIntent]; intent != "" {
			b.jobs.mark(intent, now)
			if b.autoPod.Load() {
				b.pods <- job
			}
			return
		}
		b.jobs.mark(job.Name, now)
	}, DeleteFunc: func(obj any) {
		// The garbage collector (envtest runs none): the controller deletes a spent
		// Job with background propagation, which leaves its pod to the collector.
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if job, ok := obj.(*batchv1.Job); ok && job.Labels[v1.LabelExecution] != "" {
			go func() {
				_ = b.c.DeleteAllOf(ctx, &corev1.Pod{}, client.InNamespace(job.Namespace), client.MatchingLabels{v1.LabelExecution: job.Labels[v1.LabelExecution]})
			}()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	// The garbage collector again: retention deletes a retired call's Execution in
	// the background, which leaves its Job (and so its pod) to the collector.
	execInf, err := hc.GetInformer(ctx, &v1.Execution{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := execInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{DeleteFunc: func(obj any) {
		if tomb, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if exec, ok := obj.(*v1.Execution); ok {
			go func() {
				_ = b.c.DeleteAllOf(ctx, &batchv1.Job{}, client.InNamespace(exec.Namespace), client.MatchingLabels{v1.LabelExecution: exec.Name},
					client.PropagationPolicy(metav1.DeletePropagationBackground))
			}()
		}
	}}); err != nil {
		t.Fatal(err)
	}
	intentInf, err := hc.GetInformer(ctx, &v1.ToolIntent{})
	if err != nil {
		t.Fatal(err)
	}
	onIntent := func(obj any) {
		if in, ok := obj.(*v1.ToolIntent); ok && in.Status.Observation != nil {
			b.done.mark(in.Name, time.Now())
		}
	}
	if _, err := intentInf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: onIntent, UpdateFunc: func(_, obj any) { onIntent(obj) },
	}); err != nil {
		t.Fatal(err)
	}
	go func() { _ = hc.Start(ctx) }()
	if !hc.WaitForCacheSync(ctx) {
		t.Fatal("harness cache did not sync")
	}

	// The kubelet (envtest runs none): every controller Job gets a pod that finishes
	// at once with exit code 0.
	b.kubelet(ctx, 2)

	// The controller, as cmd/manager runs it (no client-side rate limit), with every
	// request counted.
	mcfg := rest.CopyConfig(env.Config)
	mcfg.QPS, mcfg.Burst = -1, 0
	mcfg.WrapTransport = b.counter.wrap
	mgr, err := ctrl.NewManager(mcfg, ctrl.Options{
		Scheme: env.Scheme,
		// The in-process phases' namespace only: the controller process of (7) works
		// in its own.
		Cache:                  managerCache(b.ns),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := controller.SetupWithManager(mgr, controller.Options{RunnerImage: runnerImage, DefaultSandboxImage: sandboxImage}); err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mgr.Start(mctx) }()
	var stopOnce sync.Once
	b.stopMgr = func(t *testing.T) {
		t.Helper()
		stopOnce.Do(func() {
			mcancel()
			// Start returns once every runnable has ended (or fails when one outlives
			// the grace period).
			if err := <-mdone; err != nil {
				t.Errorf("manager exited with an error: %v", err)
			}
		})
	}
	t.Cleanup(func() { b.stopMgr(t) })
	if !mgr.GetCache().WaitForCacheSync(mctx) {
		t.Fatal("manager cache did not sync")
	}

	// The tasks: external agents, their own claims, Edit mode.
	names := []string{"grow", "writes"}
	for i := range 10 {
		names = append(names, fmt.Sprintf("lat-%d", i), fmt.Sprintf("burst-%d", i))
	}
	for _, name := range names {
		b.createTask(t, b.ns, name, 0)
	}
	time.Sleep(2 * time.Second) // the tasks' first reconciles settle
	return b
}

// kubelet starts n workers that finish the pod of every controller Job the harness
// sees, until ctx ends.
func (b *bench) kubelet(ctx context.Context, n int) {
	for range n {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case job := <-b.pods:
					b.finishPod(ctx, job)
				}
			}
		}()
	}
}

// createTask creates an external-agent task in Edit mode whose calls the proposer
// makes, with room for at least intents intents, and keeps it (with its UID) for
// the owner references of its intents.
func (b *bench) createTask(t *testing.T, ns, name string, intents int) {
	t.Helper()
	task := &v1.AgentTask{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1.AgentTaskSpec{
			Goal: "pipeline benchmark",
			Mode: v1.ModeEdit,
			// Room for the burst's and the growing task's intents (default 100).
			Budgets:   v1.Budgets{MaxIntents: max(10000, int32(intents)), MaxTurns: max(1000, int32(intents))}, //nolint:gosec // a flag's small count
			Workspace: v1.WorkspaceSpec{VolumeClaim: &v1.WorkspaceVolumeClaim{Storage: resource.MustParse("1Gi")}},
			Agent:     v1.AgentSpec{External: &v1.ExternalAgent{Proposers: v1.Proposers{Users: []string{proposer}}}},
		},
	}
	if err := b.c.Create(t.Context(), task); err != nil {
		t.Fatal(err)
	}
	if task.UID == "" {
		t.Fatalf("task %s/%s: no UID after its create", ns, name)
	}
	b.mu.Lock()
	b.tasks[name] = task
	b.mu.Unlock()
}

// managerCache is the cache cmd/manager runs with (controller.CacheOptions), limited
// to the bench's namespace.
func managerCache(ns string) cache.Options {
	opts := controller.CacheOptions()
	opts.DefaultNamespaces = map[string]cache.Config{ns: {}}
	return opts
}

// newIntent builds the next allowed call of task: turn n, index 0, with the task as
// its controller owner, as `kubectl toolgate propose` and the agent loop create
// them. Without owned, it has no owner reference, as a raw `kubectl create` of an
// intent, which the controller adopts.
func (b *bench) newIntent(task string, owned bool) *v1.ToolIntent {
	b.mu.Lock()
	n := b.seq[task]
	b.seq[task]++
	owner := b.tasks[task]
	b.mu.Unlock()
	meta := metav1.ObjectMeta{Namespace: owner.Namespace, Name: fmt.Sprintf("%s-%d", task, n)}
	if owned {
		meta.OwnerReferences = []metav1.OwnerReference{*metav1.NewControllerRef(owner, v1.GroupVersion.WithKind("AgentTask"))}
	}
	return &v1.ToolIntent{
		ObjectMeta: meta,
		Spec: v1.ToolIntentSpec{
			TaskRef: v1.LocalObjectReference{Name: task}, Turn: int32(n), Index: 0, //nolint:gosec // n is small
			Tool: v1.ToolBash, Input: k8sruntime.RawExtension{Raw: []byte(allowedInput)}, RequestedBy: proposer,
		},
	}
}

// intent creates the next call of task and returns the time from the create to its
// Job seen; with waitDone, it then waits for the call's observation (an agent that
// proposes its next call once it has seen this one's result).
func (b *bench) intent(t *testing.T, task string, waitDone bool) time.Duration {
	t.Helper()
	in := b.newIntent(task, true)
	start := time.Now()
	if err := b.c.Create(t.Context(), in); err != nil {
		t.Fatal(err)
	}
	seen, err := b.jobs.waitFor(t.Context(), in.Name, waitLimit)
	if err != nil {
		t.Fatalf("intent %s: no Job: %v", in.Name, err)
	}
	if waitDone {
		if _, err := b.done.waitFor(t.Context(), in.Name, waitLimit); err != nil {
			t.Fatalf("intent %s: not observed: %v", in.Name, err)
		}
	}
	return seen.Sub(start)
}

// freshList times a consistent LIST (no resourceVersion) of the namespace's
// ToolPolicies, as a decision reads them (policyset.Cache.LoadFresh). Made right
// after a write, it shows what the API server's consistent read costs: served from
// its watch cache once that is known to be current, which waits for etcd's progress
// notification when writes are in flight.
func (b *bench) freshList(t *testing.T) time.Duration {
	t.Helper()
	start := time.Now()
	if err := b.c.List(t.Context(), &v1.ToolPolicyList{}, client.InNamespace(b.ns)); err != nil {
		t.Fatal(err)
	}
	return time.Since(start)
}

// directJob creates a Job as any client would, and returns the time until the
// harness's watch sees it: the floor under an intent's path to its Job.
func (b *bench) directJob(t *testing.T, name string) time.Duration {
	t.Helper()
	job := &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Namespace: b.ns, Name: name},
		Spec: batchv1.JobSpec{
			Suspend: ptr.To(true),
			Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
				RestartPolicy: corev1.RestartPolicyNever,
				Containers:    []corev1.Container{{Name: "c", Image: sandboxImage}},
			}},
		},
	}
	start := time.Now()
	if err := b.c.Create(t.Context(), job); err != nil {
		t.Fatal(err)
	}
	seen, err := b.jobs.waitFor(t.Context(), name, waitLimit)
	if err != nil {
		t.Fatalf("Job %s never seen: %v", name, err)
	}
	return seen.Sub(start)
}

type writeCounts struct {
	n                int
	total, reads     float64 // before the Job
	life, lifeReads  float64 // from the create until quiet after the observation
	byKey, lifeByKey map[string]float64
}

// countWrites runs n intents one at a time, each on a quiet controller, and
// averages the controller's writes from the intent's create to its Job's create,
// and from its create until the controller is quiet again after its observation.
// owned is newIntent's.
func (b *bench) countWrites(t *testing.T, n int, owned bool) writeCounts {
	t.Helper()
	out := writeCounts{n: n, byKey: map[string]float64{}, lifeByKey: map[string]float64{}}
	if n <= 0 {
		return out
	}
	b.autoPod.Store(false)
	defer b.autoPod.Store(true)
	for range n {
		b.quiet(t)
		from := b.counter.mark()
		readsFrom := b.counter.readCount()
		in := b.newIntent("writes", owned)
		if err := b.c.Create(t.Context(), in); err != nil {
			t.Fatal(err)
		}
		if _, err := b.jobs.waitFor(t.Context(), in.Name, waitLimit); err != nil {
			t.Fatalf("intent %s: no Job: %v", in.Name, err)
		}
		// The watch may see the Job before the controller's create has its response.
		got, found := b.counter.writesUntilJob(from)
		for wait := 0; !found && wait < 500; wait++ {
			time.Sleep(10 * time.Millisecond)
			got, found = b.counter.writesUntilJob(from)
		}
		if !found {
			t.Fatalf("intent %s: its Job was seen but the controller's create was not counted", in.Name)
		}
		out.reads += float64(b.counter.readCount() - readsFrom)
		for k, v := range got {
			out.byKey[k] += float64(v)
			out.total += float64(v)
		}
		b.finishPod(t.Context(), b.jobOf(t, in.Name))
		if _, err := b.done.waitFor(t.Context(), in.Name, waitLimit); err != nil {
			t.Fatalf("intent %s: not observed: %v", in.Name, err)
		}
		// Whatever follows the observation (task status, events) is the intent's too.
		b.quiet(t)
		for k, v := range b.counter.writesBetween(from, b.counter.mark()) {
			out.lifeByKey[k] += float64(v)
			out.life += float64(v)
		}
		out.lifeReads += float64(b.counter.readCount() - readsFrom)
	}
	for _, m := range []map[string]float64{out.byKey, out.lifeByKey} {
		for k := range m {
			m[k] /= float64(n)
		}
	}
	out.total /= float64(n)
	out.reads /= float64(n)
	out.life /= float64(n)
	out.lifeReads /= float64(n)
	return out
}

// jobOf finds the controller's Job of an intent.
func (b *bench) jobOf(t *testing.T, intent string) *batchv1.Job {
	t.Helper()
	var jobs batchv1.JobList
	if err := b.c.List(t.Context(), &jobs, client.InNamespace(b.ns), client.MatchingLabels{v1.LabelIntent: intent}); err != nil || len(jobs.Items) != 1 {
		t.Fatalf("intent %s: %d Jobs (%v)", intent, len(jobs.Items), err)
	}
	return &jobs.Items[0]
}

// quiet waits until the controller made no write for 500ms.
func (b *bench) quiet(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	last, since := b.counter.mark(), time.Now()
	for time.Since(since) < 500*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatal("the controller never went quiet")
		}
		time.Sleep(50 * time.Millisecond)
		if m := b.counter.mark(); m != last {
			last, since = m, time.Now()
		}
	}
}

// burst creates n intents over the 10 burst tasks at once (8 creating clients) and
// returns the time from the first create to the last Job seen.
func (b *bench) burst(t *testing.T, n int) time.Duration {
	t.Helper()
	b.quiet(t)
	intents := make([]*v1.ToolIntent, n)
	for i := range n {
		intents[i] = b.newIntent(fmt.Sprintf("burst-%d", i%10), true)
	}
	work := make(chan *v1.ToolIntent, n)
	for _, in := range intents {
		work <- in
	}
	close(work)
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for in := range work {
				if err := b.c.Create(t.Context(), in); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var lastSeen time.Time
	for _, in := range intents {
		seen, err := b.jobs.waitFor(t.Context(), in.Name, 5*time.Minute)
		if err != nil {
			t.Fatalf("burst intent %s: no Job: %v", in.Name, err)
		}
		if seen.After(lastSeen) {
			lastSeen = seen
		}
	}
	b.burstNames = intents
	b.burstEnd = lastSeen
	return lastSeen.Sub(start)
}

// waitAllObserved waits for every burst intent's observation and returns the time
// from the burst's last Job to the last observation.
func (b *bench) waitAllObserved(t *testing.T, limit time.Duration) time.Duration {
	t.Helper()
	var last time.Time
	for _, in := range b.burstNames {
		at, err := b.done.waitFor(t.Context(), in.Name, limit)
		if err != nil {
			t.Fatalf("burst intent %s: not observed: %v", in.Name, err)
		}
		if at.After(last) {
			last = at
		}
	}
	return last.Sub(b.burstEnd)
}

// finishPod plays the kubelet and the Job controller for one Job: its pod, from its
// template, owned by it, finished with the runner's result of exit code 0.
func (b *bench) finishPod(ctx context.Context, job *batchv1.Job) {
	_ = testenv.FinishJobPod(ctx, b.c, job, runnerImage, sandboxImage)
}

// marks records the first time something happened, by name, and lets a caller wait
// for it.
type marks struct {
	mu   sync.Mutex
	at   map[string]time.Time
	wait map[string]chan struct{}
}

func newMarks() *marks {
	return &marks{at: map[string]time.Time{}, wait: map[string]chan struct{}{}}
}

func (m *marks) mark(name string, at time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.at[name]; ok {
		return
	}
	m.at[name] = at
	if ch, ok := m.wait[name]; ok {
		close(ch)
		delete(m.wait, name)
	}
}

func (m *marks) waitFor(ctx context.Context, name string, limit time.Duration) (time.Time, error) {
	m.mu.Lock()
	if at, ok := m.at[name]; ok {
		m.mu.Unlock()
		return at, nil
	}
	ch, ok := m.wait[name]
	if !ok {
		ch = make(chan struct{})
		m.wait[name] = ch
	}
	m.mu.Unlock()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		return time.Time{}, fmt.Errorf("not within %s", limit)
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.at[name], nil
}

type heapStats struct{ inuse, alloc, rss uint64 }

// heap returns this process's heap after a GC and its resident set.
func heap() heapStats {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return heapStats{inuse: ms.HeapInuse, alloc: ms.HeapAlloc, rss: rss()}
}

// rss reads VmRSS from /proc/self/status (0 where there is none).
func rss() uint64 { return procStatus("self", "VmRSS") }

// procStatus reads a size (VmRSS, VmHWM) from /proc/<pid>/status, in bytes (0
// where there is none).
func procStatus(pid, field string) uint64 {
	data, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb * 1024
			}
		}
	}
	return 0
}

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100 // nearest rank
	if i < 1 {
		i = 1
	}
	return s[i-1]
}

func mean(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	return sum / time.Duration(len(d))
}

// tenth returns the first or the last tenth of d.
func tenth(d []time.Duration, last bool) []time.Duration {
	n := max(len(d)/10, 1)
	if last {
		return d[len(d)-n:]
	}
	return d[:n]
}

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
