package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"sigs.k8s.io/controller-runtime/pkg/client"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/mask"
	"github.com/toolgate/toolgate/internal/tools"
	"github.com/toolgate/toolgate/internal/unidiff"
)

// approvalChange is the change an approval's call makes, as the person deciding it
// sees it: for edit_file and write_file the text written, for git_push the tree
// pushed (pushChange). summary says what diff is; both are "" for a tool that
// changes no file it names. An error says why a change that should be shown cannot
// be; for a push it means the push is not approved.
func approvalChange(ctx context.Context, c *cluster, a *v1.Approval) (summary, diff string, err error) {
	switch a.Spec.Request.Tool {
	case v1.ToolGitPush:
		return pushChange(ctx, c, a)
	case v1.ToolEditFile, v1.ToolWriteFile:
		// The intent holds the whole input; the Approval only a summary of it.
		intent := &v1.ToolIntent{}
		if err := c.client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: a.Spec.IntentRef.Name}, intent); err != nil {
			return "", "", fmt.Errorf("the change cannot be shown: reading ToolIntent %s: %w", a.Spec.IntentRef.Name, apiError(err))
		}
		return fileChange(a.Spec.Request.Tool, intent.Spec.Input.Raw)
	}
	return "", "", nil
}

// fileChange is what an edit_file or write_file input writes, as a unified diff
// with secrets masked and control characters escaped. The file's present content is
// not read (it is in the task's workspace, and may change before the call runs), so
// an edit is shown as the text it replaces and a write as the whole new file.
func fileChange(tool v1.ToolName, input []byte) (summary, diff string, err error) {
	var path, before, after, what string
	switch tool {
	case v1.ToolEditFile:
		var in tools.EditFileInput
		if err := json.Unmarshal(input, &in); err != nil {
			return "", "", fmt.Errorf("the change cannot be shown: the input is not an edit_file input: %v", err)
		}
		path, before, after = in.Path, in.OldText, in.NewText
		what = "replaces the one occurrence of this text in %s (line numbers count from the text replaced, not from the top of the file):\n"
	case v1.ToolWriteFile:
		var in tools.WriteFileInput
		if err := json.Unmarshal(input, &in); err != nil {
			return "", "", fmt.Errorf("the change cannot be shown: the input is not a write_file input: %v", err)
		}
		path, after = in.Path, in.Content
		what = "writes the whole of %s with this content (what the file holds now is not read):\n"
	default:
		return "", "", nil
	}
	d, _, _ := unidiff.UnifiedDiff(path, []byte(before), []byte(after))
	return fmt.Sprintf("%s "+what, tool, mask.Escape(path)), mask.Escape(mask.Secrets(d)), nil
}

// showChange writes approvalChange on w. A push whose change cannot be shown is an
// error: it is not approved. For a file tool, why its change cannot be shown is
// written instead, and the request above still says what is asked.
func showChange(ctx context.Context, c *cluster, a *v1.Approval, w io.Writer) error {
	summary, diff, err := approvalChange(ctx, c, a)
	if err != nil {
		if a.Spec.Request.Tool == v1.ToolGitPush {
			return err
		}
		_, err = fmt.Fprintf(w, "  %v\n", err)
		return err
	}
	_, err = io.WriteString(w, summary+diff)
	return err
}
