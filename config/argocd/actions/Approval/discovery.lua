-- Argo CD actions of a toolgate.dev Approval: approve and deny, offered only while
-- nobody has decided and the approval is still pending (a decision is final).
local spec = obj.spec or {}
local status = obj.status or {}
local open = (spec.decision or "Pending") == "Pending" and (status.state or "Pending") == "Pending"
local actions = {}
actions["approve"] = {disabled = not open, iconClass = "fa fa-fw fa-check", displayName = "Approve (as Argo CD)"}
actions["deny"] = {disabled = not open, iconClass = "fa fa-fw fa-ban", displayName = "Deny (as Argo CD)"}
return actions
