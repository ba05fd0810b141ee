-- Argo CD actions of a toolgate.dev Approval: approve and deny, offered while the
-- approval is still pending and no vote denied it (a decision is final). Whether Argo
-- CD itself voted already is the action's to say (it names its own identity).
local spec = obj.spec or {}
local status = obj.status or {}
local open = (status.state or "Pending") == "Pending"
for _, v in ipairs(spec.votes or {}) do
  if v.decision == "Denied" then
    open = false
  end
end
local actions = {}
actions["approve"] = {disabled = not open, iconClass = "fa fa-fw fa-check", displayName = "Approve (as Argo CD)"}
actions["deny"] = {disabled = not open, iconClass = "fa fa-fw fa-ban", displayName = "Deny (as Argo CD)"}
return actions
