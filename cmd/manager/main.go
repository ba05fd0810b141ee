// Command manager runs the toolgate controllers.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/agent"
	"github.com/toolgate/toolgate/internal/controller"
)

func main() {
	var (
		metricsAddr, probeAddr, pprofAddr string
		enableLeaderElection              bool
		secureMetrics                     bool
		opts                              controller.Options
		modelEndpoints                    string
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8080", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the health and readiness probes bind to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "0", "Address Go's pprof endpoints (/debug/pprof/) bind to, for profiling the controller; 0 (the default) disables them.")
	flag.BoolVar(&enableLeaderElection, "leader-elect", false, "Elect a leader so that only one replica reconciles at a time.")
	flag.BoolVar(&secureMetrics, "metrics-secure", false, "Serve metrics over HTTPS with authentication and authorization.")
	flag.StringVar(&opts.RunnerImage, "runner-image", "toolgate/runner:dev", "Image holding the runner binary, copied into every Execution's pod by an init container.")
	flag.StringVar(&opts.DefaultSandboxImage, "default-sandbox-image", "toolgate/workspace:dev", "Image tools run in when a task names none.")
	flag.StringVar(&opts.ControllerIdentity, "controller-identity", controller.DefaultControllerIdentity, "Kubernetes user the controller runs as; the agent loop names it in spec.requestedBy of the ToolIntents it creates. Change it together with config/admission.")
	flag.StringVar(&modelEndpoints, "model-endpoints", agent.DefaultEndpoints, "Comma-separated model endpoints a task's spec.agent.model.baseURL may name; the controller sends API keys only there. "+
		"An entry scheme://host[:port][/path] allows a baseURL of the same scheme, host (no wildcards) and port (omitted: the scheme's; *: any) whose path is the entry's or below it. A production install names exactly its endpoints.")
	flag.IntVar(&opts.Workers.Intent, "intent-workers", controller.DefaultWorkers.Intent, "ToolIntents reconciled at once (validation and the policy decision).")
	flag.IntVar(&opts.Workers.Execution, "execution-workers", controller.DefaultWorkers.Execution, "Executions reconciled at once (the chain check, the Job, the result).")
	flag.IntVar(&opts.Workers.Approval, "approval-workers", controller.DefaultWorkers.Approval, "Approvals reconciled at once.")
	flag.IntVar(&opts.Workers.Task, "task-workers", controller.DefaultWorkers.Task, "AgentTasks reconciled at once (their status and agent loop; a model turn waits for its endpoint).")
	flag.DurationVar(&opts.SpentJobTTL, "spent-job-ttl", controller.DefaultSpentJobTTL, "How long a call's Job and pod are kept once its Execution holds the whole result (the exit code and all the output); the Job of a call whose output was truncated, or that ended without a result, is kept a day (its full log, or why it failed, is only there). Must be positive.")
	zapOpts := zap.Options{Development: false}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	setupLog := ctrl.Log.WithName("setup")

	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(toolgatev1alpha1.AddToScheme(scheme))

	endpoints, err := agent.ParseEndpoints(modelEndpoints)
	if err != nil {
		setupLog.Error(err, "invalid --model-endpoints")
		os.Exit(1)
	}
	opts.ModelEndpoints = endpoints
	if opts.SpentJobTTL <= 0 {
		setupLog.Error(fmt.Errorf("got %s", opts.SpentJobTTL), "--spent-job-ttl must be positive, for example 1m")
		os.Exit(1)
	}

	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
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
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		setupLog.Error(err, "unable to set up ready check")
		os.Exit(1)
	}
	setupLog.Info("starting manager")
	if err := mgr.Start(ctrl.SetupSignalHandler()); err != nil {
		setupLog.Error(err, "manager exited with an error")
		os.Exit(1)
	}
}
