// Package notify turns an Approval into the messages its NotificationChannels
// receive, and signs and checks them. Everything here is pure except Post, which
// sends one message: which event an Approval is at (EventOf), what a message
// carries (Build), its Slack and CloudEvents shapes, the HMAC-SHA256 signature and
// its check (Sign, Verify), and when an attempt is due again (Due).
//
// Invariants: a message carries no way to decide: no link or token approves
// anything; it shows the kubectl line, which needs the approver's own credentials,
// and a console address to look. Untrusted text (the input, the agent's reason,
// the parts) is masked again with internal/mask, though the Approval holds it
// masked already, and escaped for Slack so it cannot add links or mentions.
package notify
