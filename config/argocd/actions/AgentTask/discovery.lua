-- Argo CD actions of a toolgate.dev AgentTask: cancel, offered while the task has not
-- finished and is not already cancelled.
local spec = obj.spec or {}
local phase = (obj.status or {}).phase
local finished = phase == "Succeeded" or phase == "Failed"
local actions = {}
actions["cancel"] = {disabled = finished or spec.lifecycle == "Cancelled", iconClass = "fa fa-fw fa-stop", displayName = "Cancel task"}
return actions
