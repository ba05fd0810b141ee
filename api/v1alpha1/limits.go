package v1alpha1

// Output bounds. Every bound on a call's output derives from MaxOutputBytesLimit; the
// CRD markers that state them are literals (markers cannot name a constant), and
// TestOutputBoundsDeriveFromOneConstant checks they agree with these.
const (
	// MaxOutputBytesLimit is the largest maxOutputBytes (an AgentTask's
	// budgets.maxOutputBytes, an Execution's spec.maxOutputBytes): the most bytes of
	// a call's combined output, head and tail, that a status shows.
	MaxOutputBytesLimit int32 = 262144

	// escapeGrowth is how much masking can make output longer: it writes each
	// control byte, and each byte that is not UTF-8, as the four characters \xNN.
	escapeGrowth = 4

	// MaxOutputTextBytes is the most a text that shows a call's output (an
	// Execution's status.output, a ToolIntent's status.observation.summary) takes
	// as the API server stores it: measured after masking, as JSON encodes it
	// (executor.StoredSize). It is 1 MiB, the largest output escaped whole, which
	// leaves half a MiB of etcd's default 1.5 MiB request limit to the rest of the
	// object. A text longer than that is cut in the middle after masking, and says
	// so.
	MaxOutputTextBytes = escapeGrowth * int(MaxOutputBytesLimit)
)

// Status bounds that the controller enforces as it fills the status; the CRD
// markers state the same numbers.
const (
	// MaxResultBytes is the most of a model's final answer status.result holds.
	MaxResultBytes = 65536
	// MaxRuleFires is how many rules status.ruleFires shows: the ones that fired
	// last (maxFires and cooldownSeconds are enforced from every recorded fire).
	MaxRuleFires = 256
	// MaxNotificationRecords is how many deliveries an Approval's
	// status.notifications records (a channel and an event each); a channel past
	// them is not told, and the controller logs it.
	MaxNotificationRecords = 64
	// MaxHistoryBaselines is how many file baselines status.history keeps of the
	// task's retired calls, the newest.
	MaxHistoryBaselines = 128
	// MaxHistoryDenials is how many fingerprints of calls a human denied
	// status.history keeps of the task's retired calls, the newest.
	MaxHistoryDenials = 64
	// MaxRetiringIntents is how many retired intents status.history lists while
	// their deletion is not seen yet; no more are retired until it is.
	MaxRetiringIntents = 200
	// MaxIntentsNamedAwaiting is how many waiting intents an AgentTask's
	// AwaitingApproval condition message names; it says how many more wait (a
	// condition message holds at most 32768 characters, a task may have thousands
	// of intents).
	MaxIntentsNamedAwaiting = 10
	// MaxResourceNames is how many resources a sandbox's limits and requests name
	// each (spec.sandbox.resources, and the sandbox a decision records).
	MaxResourceNames = 16
	// MaxPolicyRuleIDBytes bounds a ruleFires entry's id, PolicyRuleReference.String:
	// a kind, a policy name and a rule name, each at its longest, with the two
	// slashes between them.
	MaxPolicyRuleIDBytes = len(PolicyRuleKindClusterToolPolicy) + 1 + 253 + 1 + 253
	// MaxValidationErrors and MaxValidationErrorBytes bound status.validation.errors.
	MaxValidationErrors     = 64
	MaxValidationErrorBytes = 1024
)
