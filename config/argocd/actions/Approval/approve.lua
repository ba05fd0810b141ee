-- Approve a toolgate.dev Approval from Argo CD: append Argo CD's vote.
--
-- Argo CD sends the change with its own credentials, not the credentials of the
-- person who clicked, and an action script cannot know who that person is. The
-- approval-decision admission policy requires a vote's user to be the caller, so this
-- script can only vote as Argo CD's identity: set argocdIdentity to the user name Argo
-- CD patches as (its API server service account by default). The person is recorded
-- by Argo CD (its ResourceActionRan event and its audit log), not on the Approval.
-- Argo CD is one voter: an approval that needs several approvers (approvers.required)
-- counts its vote once, and the other votes come from people.
local argocdIdentity = "system:serviceaccount:argocd:argocd-server"

local spec = obj.spec or {}
local status = obj.status or {}
for _, v in ipairs(spec.votes or {}) do
  if v.user == argocdIdentity then
    error("Argo CD (" .. argocdIdentity .. ") already voted " .. v.decision .. " on Approval " .. obj.metadata.name .. "; each voter votes once and a vote is final")
  end
end
if (status.state or "Pending") ~= "Pending" then
  error("Approval " .. obj.metadata.name .. " is " .. status.state .. " and can no longer be decided")
end
obj.spec.votes = spec.votes or {}
table.insert(obj.spec.votes, {user = argocdIdentity, decision = "Approved", comment = "approved with the Argo CD approve action; Argo CD records who ran it"})
return obj
