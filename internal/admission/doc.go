// Package admission holds the integration tests of toolgate's admission policies
// (config/admission) and user-facing RBAC roles (config/rbac). It has no production
// code: the rules live in YAML that users apply, and the API server enforces them.
//
// The tests start a real kube-apiserver (envtest) with the CRDs and exactly the
// ValidatingAdmissionPolicies users install, create the roles from config/rbac under
// the names config/default gives them, and act as real users with their own client
// certificates: an agent, approvers, a member of an approver group, a user without a
// role, a user who can patch approvals but lacks the approve verb, and the
// controller's own service account. Every refusal is asserted by its message, and
// each request is built to break exactly one rule, so removing that rule makes its
// test fail.
//
// What the tests cover:
//   - Approval votes: each update appends one vote, the caller's own (user), once
//     per person, never edited or removed, never by the requester or the
//     controller's service account, only with the approve verb, only by the listed
//     users or groups when any are set, and none once the votes decided the
//     approval or it is no longer Pending.
//   - ToolIntent creation: spec.requestedBy is the caller, and every group claimed in
//     spec.requestedByGroups is one of the caller's.
//   - Who may propose into a task (proposers_test.go): with the real controller
//     running as its service account, an agent who is not among a task's proposers,
//     or anyone but the agent loop for a model task, gets ValidationFailed and no
//     Execution or Job; proposers by user, claimed group and service account get
//     through.
//   - The authorization chain (chain_attacks_test.go): with the real controller
//     running as its service account, each hole of the chain around the Approval
//     tried by the user who would try it — a task owner moving or cancelling her
//     task, a policy admin's emergency Deny, a late approval, Executions and objects
//     planted past admission, forged results, what the approver and a viewer read,
//     credentials sent elsewhere — refused with nothing run.
//   - What only the controller writes: every toolgate status, and the creation of
//     Approvals (always Pending) and Executions.
//   - The roles grant what docs/approvals.md says, checked with SubjectAccessReviews
//     against the API server's RBAC authorizer, and the controller's generated role
//     never grants approve.
package admission
