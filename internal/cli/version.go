package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/toolgate/toolgate/internal/version"
)

func newVersionCommand(o *Options) *cobra.Command {
	var clientOnly bool
	controllerNamespace := version.DefaultControllerNamespace
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the plugin's version and the controller's, and warn when they differ",
		Long: `Print the plugin's version and the version of the controller running in the
cluster, which the controller publishes at start in the ConfigMap
` + version.ConfigMapName + ` of its namespace (--controller-namespace). Reading it
needs get on that ConfigMap.

When the two differ, a warning says so on stderr: the plugin reads and writes the
objects as its own version knows them, and a controller of another version may
decide them differently (replay --dry-run, policy check).

Exit code: 0 when both versions were printed (whether or not they differ), 1 when
the controller's could not be read (the plugin's is printed all the same).`,
		Example: `  kubectl toolgate version
  kubectl toolgate version --client
  kubectl toolgate version --controller-namespace toolgate`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			plugin := version.Get()
			fmt.Fprintf(o.Streams.Out, "plugin:     %s\n", plugin)
			if clientOnly {
				return nil
			}
			c, err := o.connect()
			if err != nil {
				return err
			}
			controller, err := controllerVersion(cmd, c, controllerNamespace)
			if err != nil {
				return err
			}
			fmt.Fprintf(o.Streams.Out, "controller: %s\n", controller)
			if controller != plugin {
				fmt.Fprintf(o.Streams.ErrOut, "warning: the plugin (%s) and the controller (%s) are different versions: use a plugin of the controller's version\n", plugin, controller)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&clientOnly, "client", false, "print the plugin's version only, without connecting to the cluster")
	cmd.Flags().StringVar(&controllerNamespace, "controller-namespace", controllerNamespace, "the namespace the controller runs in")
	return cmd
}

// controllerVersion reads the version the controller published, or says what is in
// the way: no ConfigMap (no controller there, or one older than the ConfigMap), the
// RBAC the caller lacks, an empty ConfigMap.
func controllerVersion(cmd *cobra.Command, c *cluster, namespace string) (string, error) {
	where := fmt.Sprintf("ConfigMap %s/%s", namespace, version.ConfigMapName)
	cm := &corev1.ConfigMap{}
	err := c.client.Get(cmd.Context(), types.NamespacedName{Namespace: namespace, Name: version.ConfigMapName}, cm)
	switch {
	case apierrors.IsNotFound(err):
		return "", fmt.Errorf("the controller's version is unknown: there is no %s. Is toolgate's controller running in namespace %s? If it runs elsewhere, name that namespace with --controller-namespace", where, namespace)
	case apierrors.IsForbidden(err):
		return "", fmt.Errorf("the controller's version is unknown: you may not read %s; reading it needs get on configmaps (resourceName %s) in namespace %s: %w", where, version.ConfigMapName, namespace, apiError(err))
	case err != nil:
		return "", fmt.Errorf("reading the controller's version from %s: %w", where, apiError(err))
	}
	v := cm.Data[version.ConfigMapKey]
	if v == "" {
		return "", fmt.Errorf("the controller's version is unknown: %s has no data.%s", where, version.ConfigMapKey)
	}
	return v, nil
}
