-- Deny a toolgate.dev Approval from Argo CD. The comment is fed back to the model.
--
-- Like approve, the change is sent with Argo CD's credentials, so spec.decidedBy can
-- only be Argo CD's identity (set argocdIdentity to the user name Argo CD patches as).
-- An action takes no free text here, so the comment cannot carry the person's reason:
-- to explain a denial to the model, deny with kubectl and a comment instead.
local argocdIdentity = "system:serviceaccount:argocd:argocd-server"

local spec = obj.spec or {}
local status = obj.status or {}
if (spec.decision or "Pending") ~= "Pending" then
  error("Approval " .. obj.metadata.name .. " was already decided (" .. spec.decision .. " by " .. (spec.decidedBy or "unknown") .. ") and a decision is final")
end
if (status.state or "Pending") ~= "Pending" then
  error("Approval " .. obj.metadata.name .. " is " .. status.state .. " and can no longer be decided")
end
obj.spec.decision = "Denied"
obj.spec.decidedBy = argocdIdentity
obj.spec.comment = "denied by a person with the Argo CD deny action; no reason was given"
return obj
