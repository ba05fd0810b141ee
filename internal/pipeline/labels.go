package pipeline

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// ChildLabels are the labels of an intent's Approval and Execution. They help people
// find objects (kubectl get -l); the controller itself looks children up by owner and
// by field index, so a name too long for a label value is simply left out.
func ChildLabels(intent *v1.ToolIntent) map[string]string {
	out := map[string]string{}
	for k, v := range map[string]string{v1.LabelTask: intent.Spec.TaskRef.Name, v1.LabelIntent: intent.Name} {
		if len(validation.IsValidLabelValue(v)) == 0 {
			out[k] = v
		}
	}
	return out
}

// BoundedName is base+suffix, or, when that is longer than an object name may be, a
// cut of base with a hash of all of it so that two long task names stay distinct.
func BoundedName(base, suffix string) string {
	if len(base)+len(suffix) <= maxObjectName {
		return base + suffix
	}
	sum := sha256.Sum256([]byte(base))
	hash := hex.EncodeToString(sum[:])[:10]
	head := strings.TrimRight(base[:maxObjectName-len(suffix)-len(hash)-1], "-.")
	return head + "-" + hash + suffix
}

// PushIntentName is the name of a task's git_push ToolIntent: one per task.
func PushIntentName(task string) string { return BoundedName(task, "-git-push") }
