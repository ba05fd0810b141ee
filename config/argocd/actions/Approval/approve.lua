-- Approve a toolgate.dev Approval from Argo CD.
--
-- Argo CD sends the change with its own credentials, not the credentials of the
-- person who clicked, and an action script cannot know who that person is. The
-- approval-decision admission policy requires spec.decidedBy to be the caller, so this
-- script can only name Argo CD's identity: set argocdIdentity to the user name Argo CD
-- patches as (its API server service account by default). The person is recorded by
-- Argo CD (its ResourceActionRan event and its audit log), not on the Approval.
local argocdIdentity = "system:serviceaccount:argocd:argocd-server"

local spec = obj.spec or {}
local status = obj.status or {}
if (spec.decision or "Pending") ~= "Pending" then
  error("Approval " .. obj.metadata.name .. " was already decided (" .. spec.decision .. " by " .. (spec.decidedBy or "unknown") .. ") and a decision is final")
end
if (status.state or "Pending") ~= "Pending" then
  error("Approval " .. obj.metadata.name .. " is " .. status.state .. " and can no longer be decided")
end
obj.spec.decision = "Approved"
obj.spec.decidedBy = argocdIdentity
obj.spec.comment = "approved with the Argo CD approve action; Argo CD records who ran it"
return obj
