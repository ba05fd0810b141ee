// Command installer writes the release manifests (`make build-installer`): config/default
// rendered by kustomize with the release's images set, split in two files:
//
//	install.yaml    CRDs, admission policies, RBAC, the controller and its Services
//	archive-db.yaml the archive's in-cluster PostgreSQL (config/archive), optional
//
// Its tests (installer_test.go) also hold the Helm chart (dist/chart) to config/default.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Images are the release's images: the manager's own, and the three it names to
// others (the runner and the workspace through its flags, PostgreSQL through the
// archive's StatefulSet).
type Images struct {
	Controller, Runner, Workspace, Postgres string
}

// The objects the images are set in, as config/default names them.
const (
	managerDeployment  = "toolgate-controller-manager"
	managerContainer   = "manager"
	archiveStatefulSet = "toolgate-archive-db"
	postgresContainer  = "postgres"
	// archiveComponent is the label value every object of config/archive carries:
	// those objects go to archive-db.yaml.
	archiveComponent = "archive-db"
)

// header opens each file: it says where the file comes from and what it needs.
const (
	installHeader = "# toolgate, rendered from config/default by `make build-installer` (docs/install.md).\n" +
		"# The controller mounts the Secret toolgate-archive (key dsn): make it before or after\n" +
		"# applying this file; the controller's pod waits for it.\n"
	archiveHeader = "# The archive's PostgreSQL (config/archive), rendered by `make build-installer`\n" +
		"# (docs/install.md). Optional: leave it out when the Secret toolgate-archive names a\n" +
		"# PostgreSQL of your own. It reads its password from that Secret (key password).\n"
)

func main() {
	var (
		images Images
		config string
		out    string
	)
	flag.StringVar(&config, "config", "config/default", "The kustomization to render.")
	flag.StringVar(&out, "o", "dist", "Folder install.yaml and archive-db.yaml are written to.")
	flag.StringVar(&images.Controller, "controller-image", "", "The controller's image (IMG).")
	flag.StringVar(&images.Runner, "runner-image", "", "The runner's image (RUNNER_IMG), copied into every call's pod.")
	flag.StringVar(&images.Workspace, "workspace-image", "", "The image tools run in when a task names none (WORKSPACE_IMG).")
	flag.StringVar(&images.Postgres, "postgres-image", "", "The archive's PostgreSQL image (POSTGRES_IMG).")
	flag.Parse()
	if err := run(config, out, images); err != nil {
		fmt.Fprintln(os.Stderr, "installer:", err)
		os.Exit(1)
	}
}

func run(config, out string, images Images) error {
	for flagName, v := range map[string]string{"controller-image": images.Controller, "runner-image": images.Runner, "workspace-image": images.Workspace, "postgres-image": images.Postgres} {
		if v == "" {
			return fmt.Errorf("-%s is required", flagName)
		}
	}
	m, err := Kustomize(config)
	if err != nil {
		return err
	}
	if err := SetImages(m, images); err != nil {
		return err
	}
	install, archiveDB, err := Split(m)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for name, content := range map[string]string{
		"install.yaml":    installHeader + install,
		"archive-db.yaml": archiveHeader + archiveDB,
	} {
		if err := os.WriteFile(filepath.Join(out, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Kustomize renders a kustomization folder, as `kubectl kustomize` does: in its
// legacy order (Namespace and CRDs first, webhooks last), so that `kubectl apply -f`
// makes the namespace before the objects in it.
func Kustomize(dir string) (resmap.ResMap, error) {
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	return m, nil
}

// SetImages sets the release's images in the rendered objects. Each place it sets
// must exist: a renamed container or flag in config/ fails here rather than
// shipping a manifest with the development images.
func SetImages(m resmap.ResMap, images Images) error {
	manager, err := container(m, "Deployment", managerDeployment, managerContainer)
	if err != nil {
		return err
	}
	if err := manager.PipeE(yaml.SetField("image", yaml.NewStringRNode(images.Controller))); err != nil {
		return err
	}
	args, err := manager.Pipe(yaml.Lookup("args"))
	if err != nil || args == nil {
		return fmt.Errorf("the container %s of %s has no args", managerContainer, managerDeployment)
	}
	for flagName, image := range map[string]string{"--runner-image": images.Runner, "--default-sandbox-image": images.Workspace} {
		if err := setArg(args, flagName, image); err != nil {
			return err
		}
	}
	postgres, err := container(m, "StatefulSet", archiveStatefulSet, postgresContainer)
	if err != nil {
		return err
	}
	return postgres.PipeE(yaml.SetField("image", yaml.NewStringRNode(images.Postgres)))
}

// container finds a container of a workload by kind, name and container name.
func container(m resmap.ResMap, kind, name, containerName string) (*yaml.RNode, error) {
	for _, r := range m.Resources() {
		if r.GetKind() != kind || r.GetName() != name {
			continue
		}
		c, err := r.Pipe(yaml.Lookup("spec", "template", "spec", "containers"), yaml.MatchElement("name", containerName))
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		if c == nil {
			return nil, fmt.Errorf("%s %s has no container %s", kind, name, containerName)
		}
		return c, nil
	}
	return nil, fmt.Errorf("no %s %s in the rendered objects", kind, name)
}

// setArg sets the value of the one --flag=value argument of args.
func setArg(args *yaml.RNode, flagName, value string) error {
	found := 0
	for _, a := range args.Content() {
		if strings.HasPrefix(a.Value, flagName+"=") {
			a.Value = flagName + "=" + value
			found++
		}
	}
	if found != 1 {
		return fmt.Errorf("the manager's args hold %s %d times, not once", flagName, found)
	}
	return nil
}

// Split returns the objects of install.yaml and of archive-db.yaml, as YAML streams.
func Split(m resmap.ResMap) (install, archiveDB string, err error) {
	var core, archive []*resource.Resource
	for _, r := range m.Resources() {
		if r.GetLabels()["app.kubernetes.io/component"] == archiveComponent {
			archive = append(archive, r)
		} else {
			core = append(core, r)
		}
	}
	if len(archive) == 0 {
		return "", "", errors.New("no object is labelled app.kubernetes.io/component=" + archiveComponent + ": config/archive is missing from the kustomization")
	}
	if install, err = stream(core); err != nil {
		return "", "", err
	}
	if archiveDB, err = stream(archive); err != nil {
		return "", "", err
	}
	return install, archiveDB, nil
}

func stream(rs []*resource.Resource) (string, error) {
	var b bytes.Buffer
	for i, r := range rs {
		y, err := r.AsYAML()
		if err != nil {
			return "", err
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(y)
	}
	return b.String(), nil
}
