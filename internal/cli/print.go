package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/yaml"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// Output formats of -o.
const (
	outputText = ""
	outputJSON = "json"
	outputYAML = "yaml"
)

// addOutputFlag adds -o/--output to a command that can print its result as data.
func addOutputFlag(cmd *cobra.Command, into *string) {
	cmd.Flags().StringVarP(into, "output", "o", outputText, "Output format: json or yaml (the documented data structure); empty for text")
}

// checkOutput rejects an unknown -o value before any work is done.
func checkOutput(format string) error {
	switch format {
	case outputText, outputJSON, outputYAML:
		return nil
	}
	return fmt.Errorf("--output %q is not supported: use json or yaml, or leave it out for text", format)
}

// printData writes v as indented JSON or as YAML.
func printData(w io.Writer, format string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if format == outputYAML {
		if data, err = yaml.JSONToYAML(data); err != nil {
			return err
		}
		_, err = w.Write(data)
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

// indent prefixes every line of s.
func indent(s, prefix string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return prefix + strings.ReplaceAll(s, "\n", "\n"+prefix)
}

// shortFingerprint is enough of a fingerprint for a person to compare.
func shortFingerprint(fp string) string {
	if len(fp) > 16 {
		return fp[:16]
	}
	return fp
}

// wallsText names the walls that are up, "none" when there are none.
func wallsText(w *v1.SandboxWalls) string {
	var up []string
	if w != nil && w.ReadOnlyWorkspace {
		up = append(up, "read-only workspace")
	}
	if w != nil && w.NoNetwork {
		up = append(up, "no network")
	}
	if len(up) == 0 {
		return "none"
	}
	return strings.Join(up, ", ")
}

// wallsLine is the walls with their reason, or what applies without walls.
func wallsLine(w *v1.SandboxWalls) string {
	text := wallsText(w)
	if w != nil && w.NoOutputCopy {
		// Not a wall of the sandbox (replay compares wallsText), but what the
		// person deciding should know: the output stays out of the workspace.
		if text == "none" {
			text = "no copy of the output in the workspace"
		} else {
			text += ", no copy of the output in the workspace"
		}
	}
	if text == "none" {
		return "none (the task's sandbox applies as it is)"
	}
	if w.Reason != "" {
		text += " (" + w.Reason + ")"
	}
	return text
}

// sandboxLine says what the call runs in: the image, the runtime class, and the
// workspace as the call mounts it (the walls applied).
func sandboxLine(p v1.SandboxProfile) string {
	text := "image " + p.Image
	if p.RuntimeClassName != nil {
		text += ", runtimeClass " + *p.RuntimeClassName
	}
	mount := "read-write"
	if p.ReadOnlyWorkspace {
		mount = "read-only"
	}
	return text + ", workspace claim " + p.WorkspaceClaimName + " mounted " + mount
}

// networkLine says what the call's sandbox may reach, for the person deciding it:
// every destination, and the cluster DNS with what it lets out.
func networkLine(n v1.NetworkSpec) string {
	if n.Mode == "" || n.Mode == v1.NetworkNone {
		return "none: all egress denied"
	}
	var parts []string
	for _, rule := range n.Egress {
		ports := "every port"
		if len(rule.Ports) > 0 {
			ps := make([]string, len(rule.Ports))
			for i, p := range rule.Ports {
				ps[i] = strconv.Itoa(int(p))
			}
			ports = "TCP " + strings.Join(ps, ",")
		}
		parts = append(parts, rule.CIDR+" ("+ports+")")
	}
	if n.ClusterDNS {
		parts = append(parts, "the cluster DNS (a name the call looks up can carry data out when the DNS server forwards it)")
	}
	if len(parts) == 0 {
		return string(n.Mode) + " of nothing: all egress denied"
	}
	return string(n.Mode) + ": " + strings.Join(parts, "; ")
}

// oneLine cuts s to n runes on one line, for tables.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// timestamp formats a time for people, in UTC.
func timestamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}

// humanDuration is kubectl's style of age: 45s, 12m, 3h, 2d.
func humanDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "-" + humanDuration(-d)
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
