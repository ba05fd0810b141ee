// Command manager runs the toolgate controllers.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/archive"
	"github.com/toolgate/toolgate/internal/controller"
	"github.com/toolgate/toolgate/internal/judge"
	"github.com/toolgate/toolgate/internal/mcpserver"
	"github.com/toolgate/toolgate/internal/notify"
	"github.com/toolgate/toolgate/internal/version"
)

// config is what the command line sets.
type config struct {
	metricsAddr, probeAddr, pprofAddr string
	mcpAddr                           string
	mcpMaxWait                        time.Duration
	enableLeaderElection              bool
	secureMetrics                     bool
	opts                              controller.Options
	zap                               zap.Options
	archiveAPI                        archiveAPIConfig
}

// parseFlags reads args into a config, and refuses a value the controller could
// not run with, naming the flag.
func parseFlags(fs *flag.FlagSet, args []string) (config, error) {
	var (
		c              = config{zap: zap.Options{Development: false}}
		modelEndpoints string
		judgeEndpoint  string
		judgeModel     string
		judgeKeyFile   string
		judgeTimeout   time.Duration
		judgeSlots     int
		archiveDSNFile string
	)
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.StringVar(&c.probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	fs.StringVar(&c.pprofAddr, "pprof-bind-address", "0", "Address Go's pprof endpoints (/debug/pprof/) bind to, for profiling the controller; 0 (the default) disables them.")
	fs.StringVar(&c.mcpAddr, "mcp-bind-address", "0", "Address the MCP endpoint (one per AgentTask with an external agent, at /mcp/NAMESPACE/TASK) binds to; 0 (the default) disables it. It carries bearer tokens: expose it only over TLS (an Ingress or a mesh) or a port-forward.")
	fs.DurationVar(&c.mcpMaxWait, "mcp-max-wait", mcpserver.DefaultMaxWait, "How long an MCP tools/call waits for its observation (an approval included) before it returns saying the call is still waiting, to be picked up with toolgate_wait. Must be positive.")
	fs.BoolVar(&c.enableLeaderElection, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	fs.BoolVar(&c.secureMetrics, "metrics-secure", false, "Serve metrics over HTTPS with authentication and authorization.")
	fs.StringVar(&c.opts.RunnerImage, "runner-image", "toolgate/runner:dev", "Image holding the runner binary, copied into every Execution's pod by an init container.")
	fs.StringVar(&c.opts.DefaultSandboxImage, "default-sandbox-image", "toolgate/workspace:dev", "Image tools run in when a task names none.")
	fs.StringVar(&c.opts.ControllerIdentity, "controller-identity", controller.DefaultControllerIdentity, "Kubernetes user the controller runs as; the agent loop names it in spec.requestedBy of the ToolIntents it creates. Change it together with config/admission.")
	fs.StringVar(&modelEndpoints, "model-endpoints", agent.DefaultEndpoints, "Comma-separated model endpoints a task's spec.agent.model.baseURL may name; the controller sends API keys only there. "+
		"An entry scheme://host[:port][/path] allows a baseURL of the same scheme, host (no wildcards) and port (omitted: the scheme's; *: any) whose path is the entry's or below it. A production install names exactly its endpoints.")
	fs.StringVar(&judgeEndpoint, "judge-endpoint", "", "OpenAI-compatible endpoint (API root, e.g. http://vllm:8000/v1) of the judge model that evaluates the match.judge conditions of DryRun rules; its verdicts are recorded on decisions and measured, never acted on. Empty: no judge, and such rules' verdicts say so.")
	fs.StringVar(&judgeModel, "judge-model", "", "Model name the judge endpoint serves; required with --judge-endpoint.")
	fs.StringVar(&judgeKeyFile, "judge-api-key-file", "", "File holding the judge endpoint's API key (a mounted Secret); empty sends none.")
	fs.DurationVar(&judgeTimeout, "judge-timeout", 2*time.Second, "How long a decision waits for the judge (a free slot included) before its verdicts are unknown. Must be positive.")
	fs.IntVar(&judgeSlots, "judge-concurrency", 4, "Judge requests in flight at once. Must be at least 1.")
	workers := []struct {
		n          *int
		name, help string
		def        int
	}{
		{&c.opts.Workers.Intent, "intent-workers", "ToolIntents reconciled at once (validation and the policy decision).", controller.DefaultWorkers.Intent},
		{&c.opts.Workers.Execution, "execution-workers", "Executions reconciled at once (the chain check, the Job, the result).", controller.DefaultWorkers.Execution},
		{&c.opts.Workers.Approval, "approval-workers", "Approvals reconciled at once.", controller.DefaultWorkers.Approval},
		{&c.opts.Workers.Task, "task-workers", "AgentTasks reconciled at once (their status and agent loop; a model turn waits for its endpoint).", controller.DefaultWorkers.Task},
	}
	for _, w := range workers {
		fs.IntVar(w.n, w.name, w.def, w.help)
	}
	fs.DurationVar(&c.opts.SpentJobTTL, "spent-job-ttl", controller.DefaultSpentJobTTL, "How long a call's Job and pod are kept once its Execution holds the whole result (the exit code and all the output); the Job of a call whose output was truncated, or that ended without a result, is kept a day (its full log, or why it failed, is only there). Must be positive.")
	fs.DurationVar(&c.opts.SessionIdleTimeout, "session-idle-timeout", controller.DefaultSessionIdleTimeout, "How long the session pods of a task with isolation Session stay up with no call; the next call starts them again. Must be positive.")
	fs.DurationVar(&c.opts.CallRetention, "call-retention", controller.DefaultCallRetention, "How long a finished call stays in the cluster after its observation, once the archive holds its record; its Approval, Execution and Job leave with it (docs/archive.md). Without an archive nothing is deleted. Must be positive.")
	fs.DurationVar(&c.opts.TaskTTLAfterFinished, "task-ttl-after-finished", controller.DefaultTaskTTLAfterFinished, "How long an ended task stays in the cluster when its spec.ttlSecondsAfterFinished is unset, once all its calls left and the archive holds its record. Without an archive nothing is deleted. Must be positive.")
	fs.StringVar(&archiveDSNFile, "archive-dsn-file", "", "File holding the PostgreSQL connection string of the archive (a mounted Secret), where every finished call's record is stored (docs/archive.md). Empty: no archive, and the records stay in etcd only.")
	n := &c.opts.Notifications
	fs.StringVar(&n.Namespace, "notification-namespace", "", "The controller's own namespace (config/manager passes the pod's): its NotificationChannels announce the Approvals of every namespace (a channel elsewhere announces its own namespace's). Empty, the default: none is cluster-wide, since a fixed name would hand every namespace's approvals to whoever may write in a namespace of that name.")
	fs.IntVar(&n.Workers, "notification-workers", controller.DefaultNotificationWorkers, "Approvals announced at once; each waits for its receivers, never for the pipeline, nor the pipeline for it. Must be at least 1.")
	fs.DurationVar(&n.Timeout, "notification-timeout", controller.DefaultNotificationTimeout, "How long one attempt to deliver a notification waits for its receiver. Must be positive.")
	fs.DurationVar(&n.Retry.Base, "notification-backoff", notify.DefaultRetry.Base, "Wait after a notification's first failed attempt; each next wait doubles. Must be positive.")
	fs.DurationVar(&n.Retry.Cap, "notification-max-backoff", notify.DefaultRetry.Cap, "Longest wait between a notification's attempts. Must be at least --notification-backoff.")
	var maxAttempts int
	fs.IntVar(&maxAttempts, "notification-max-attempts", int(notify.DefaultRetry.MaxAttempts), "Attempts to deliver a notification before it is given up (the channel's Delivering condition and toolgate_notifications_given_up_total say so). Must be at least 1.")
	addArchiveAPIFlags(fs, &c.archiveAPI)
	c.zap.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return config{}, err
	}
	endpoints, err := agent.ParseEndpoints(modelEndpoints)
	if err != nil {
		return config{}, fmt.Errorf("--model-endpoints: %w", err)
	}
	c.opts.ModelEndpoints = endpoints
	for _, w := range workers {
		if *w.n < 1 {
			return config{}, fmt.Errorf("--%s must be at least 1, got %d", w.name, *w.n)
		}
	}
	switch {
	case n.Workers < 1:
		return config{}, fmt.Errorf("--notification-workers must be at least 1, got %d", n.Workers)
	case n.Timeout <= 0:
		return config{}, fmt.Errorf("--notification-timeout must be positive, for example 10s; got %s", n.Timeout)
	case n.Retry.Base <= 0:
		return config{}, fmt.Errorf("--notification-backoff must be positive, for example 5s; got %s", n.Retry.Base)
	case n.Retry.Cap < n.Retry.Base:
		return config{}, fmt.Errorf("--notification-max-backoff must be at least --notification-backoff (%s), got %s", n.Retry.Base, n.Retry.Cap)
	case maxAttempts < 1 || maxAttempts > 100:
		return config{}, fmt.Errorf("--notification-max-attempts must be between 1 and 100, got %d", maxAttempts)
	}
	n.Retry.MaxAttempts = int32(maxAttempts)
	if c.opts.SessionIdleTimeout <= 0 {
		return config{}, fmt.Errorf("--session-idle-timeout must be positive, for example 10m; got %s", c.opts.SessionIdleTimeout)
	}
	if c.mcpMaxWait <= 0 {
		return config{}, fmt.Errorf("--mcp-max-wait must be positive, for example 5m; got %s", c.mcpMaxWait)
	}
	if c.opts.CallRetention <= 0 {
		return config{}, fmt.Errorf("--call-retention must be positive, for example 1h; got %s", c.opts.CallRetention)
	}
	if c.opts.TaskTTLAfterFinished <= 0 {
		return config{}, fmt.Errorf("--task-ttl-after-finished must be positive, for example 24h; got %s", c.opts.TaskTTLAfterFinished)
	}
	if c.opts.SpentJobTTL <= 0 {
		return config{}, fmt.Errorf("--spent-job-ttl must be positive, for example 1m; got %s", c.opts.SpentJobTTL)
	}
	if archiveDSNFile != "" {
		data, err := os.ReadFile(archiveDSNFile)
		if err != nil {
			return config{}, fmt.Errorf("--archive-dsn-file: %w", err)
		}
		dsn := strings.TrimSpace(string(data))
		if dsn == "" {
			// pgx would take an empty string for its defaults (a local server, the
			// OS user): an empty Secret must not archive somewhere nobody chose.
			return config{}, fmt.Errorf("--archive-dsn-file %s is empty: it must hold the archive's PostgreSQL connection string, for example host=db user=toolgate dbname=toolgate", archiveDSNFile)
		}
		if c.opts.Archive, err = archive.New(dsn); err != nil {
			return config{}, fmt.Errorf("--archive-dsn-file %s: %w", archiveDSNFile, err)
		}
	}
	if err := c.archiveAPI.check(c.opts.Archive); err != nil {
		return config{}, err
	}
	if judgeEndpoint != "" {
		if c.opts.Judge, err = newJudge(judgeEndpoint, judgeModel, judgeKeyFile, judgeTimeout, judgeSlots); err != nil {
			return config{}, err
		}
	}
	return c, nil
}

// newJudge builds the judge the --judge-* flags describe.
func newJudge(endpoint, model, keyFile string, timeout time.Duration, slots int) (*judge.Judge, error) {
	switch {
	case model == "":
		return nil, fmt.Errorf("--judge-model is required with --judge-endpoint")
	case timeout <= 0:
		return nil, fmt.Errorf("--judge-timeout must be positive, for example 2s; got %s", timeout)
	case slots < 1:
		return nil, fmt.Errorf("--judge-concurrency must be at least 1, got %d", slots)
	}
	var key string
	if keyFile != "" {
		data, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("--judge-api-key-file: %w", err)
		}
		key = strings.TrimSpace(string(data))
	}
	// One attempt: a verdict that comes late is unknown, never retried into the
	// decision's path.
	client, err := agent.NewClient(agent.ClientConfig{BaseURL: endpoint, APIKey: key, RequestTimeout: timeout, MaxAttempts: 1, HTTPClient: judge.HTTPClient()})
	if err != nil {
		return nil, fmt.Errorf("--judge-endpoint: %w", err)
	}
	return judge.New(client, judge.Config{Model: model, Timeout: timeout, Concurrency: slots}), nil
}

func main() {
	c, err := parseFlags(flag.CommandLine, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	metricsAddr, probeAddr, pprofAddr := c.metricsAddr, c.probeAddr, c.pprofAddr
	enableLeaderElection, secureMetrics, opts := c.enableLeaderElection, c.secureMetrics, c.opts
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.zap)))
	setupLog := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))

	restConfig := ctrl.GetConfigOrDie()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme: scheme,
		// Limits the cache to toolgate's own Jobs, Pods and NetworkPolicies and to
		// the Secrets labelled as model credentials.
		Cache: controller.CacheOptions(),
		Metrics: metricsserver.Options{
			BindAddress:   metricsAddr,
			SecureServing: secureMetrics,
			// HTTP/2 is disabled: it is exposed to the HTTP/2 Rapid Reset and Stream
			// Cancellation vulnerabilities.
			TLSOpts: []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }},
		},
		HealthProbeBindAddress: probeAddr,
		PprofBindAddress:       pprofAddr,
		LeaderElection:         enableLeaderElection,
		LeaderElectionID:       "toolgate.toolgate.dev",
	})
	if err != nil {
		setupLog.Error(err, "unable to create manager")
		os.Exit(1)
	}
	if err := controller.SetupWithManager(mgr, opts); err != nil {
		setupLog.Error(err, "unable to set up controllers")
		os.Exit(1)
	}
	if c.mcpAddr != "0" {
		kube, err := kubernetes.NewForConfig(restConfig)
		if err != nil {
			setupLog.Error(err, "unable to create the MCP endpoint's client")
			os.Exit(1)
		}
		endpoint := &mcpserver.Server{Config: restConfig, Reviews: kube.AuthenticationV1().TokenReviews(), Discovery: kube.Discovery().RESTClient(), Scheme: scheme,
			MaxWait: c.mcpMaxWait, Log: ctrl.Log.WithName("mcp")}
		if err := mgr.Add(mcpserver.Runnable{Addr: c.mcpAddr, Server: endpoint}); err != nil {
			setupLog.Error(err, "unable to add the MCP endpoint")
			os.Exit(1)
		}
	}
	if err := addArchiveAPI(mgr, c.archiveAPI, c.opts.Archive); err != nil {
		setupLog.Error(err, "unable to add the archive's API")
		os.Exit(1)
	}
	ns, err := ownNamespace()
	if err != nil {
		setupLog.Error(err, "unable to publish the version")
		os.Exit(1)
	}
	if ns == "" {
		setupLog.Info("not publishing the version for kubectl toolgate version: the manager's namespace is unknown (set POD_NAMESPACE)")
	} else if err := mgr.Add(versionPublisher{reader: mgr.GetAPIReader(), writer: mgr.GetClient(), namespace: ns, version: version.Get()}); err != nil {
		setupLog.Error(err, "unable to add the version's publisher")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}
	setupLog.Info("starting manager", "version", version.Get())
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "manager exited with an error")
		os.Exit(1)
	}
}
