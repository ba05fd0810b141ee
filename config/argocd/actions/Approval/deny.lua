-- Deny a toolgate.dev Approval from Argo CD: append Argo CD's Deny, which denies the
-- approval whatever else was voted. The comment is fed back to the model.
--
-- Like approve, the change is sent with Argo CD's credentials, so the vote can only
-- be Argo CD's (set argocdIdentity to the user name Argo CD patches as). An action
-- takes no free text here, so the comment cannot carry the person's reason: to
-- explain a denial to the model, deny with kubectl and a comment instead.
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
table.insert(obj.spec.votes, {user = argocdIdentity, decision = "Denied", comment = "denied by a person with the Argo CD deny action; no reason was given"})
return obj
