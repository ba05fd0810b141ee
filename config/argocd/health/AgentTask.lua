-- Argo CD health of a toolgate.dev AgentTask.
--
-- Read from the status the controller writes (api/v1alpha1: phase and the Ready,
-- AwaitingApproval, Succeeded and Failed conditions). Uses only Lua's base and table
-- libraries: Argo CD runs health checks without the string library.
--
--   no status, or status.observedGeneration < metadata.generation -> Progressing
--   Failed=True            -> Degraded (the condition's reason and message)
--   Succeeded=True         -> Healthy
--   AwaitingApproval=True  -> Suspended (a human has to decide an Approval)
--   Ready not True         -> Progressing (the workspace is pending; the message says why)
--   otherwise (running)    -> Progressing
local function condition(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function describe(c)
  if c.message ~= nil and c.message ~= "" then
    return c.reason .. ": " .. c.message
  end
  return c.reason
end

local status = obj.status
if status == nil or (status.phase == nil and status.conditions == nil) then
  return {status = "Progressing", message = "waiting for the controller: the task has no status yet"}
end
local generation = obj.metadata.generation
local observed = status.observedGeneration or 0
if generation ~= nil and observed < generation then
  return {status = "Progressing", message = "waiting for the controller: status describes generation " .. observed .. ", the spec is at generation " .. generation}
end

local conditions = status.conditions
local failed = condition(conditions, "Failed")
if failed ~= nil and failed.status == "True" then
  return {status = "Degraded", message = describe(failed)}
end
local succeeded = condition(conditions, "Succeeded")
if succeeded ~= nil and succeeded.status == "True" then
  return {status = "Healthy", message = describe(succeeded)}
end
local awaiting = condition(conditions, "AwaitingApproval")
if awaiting ~= nil and awaiting.status == "True" then
  return {status = "Suspended", message = describe(awaiting)}
end
local ready = condition(conditions, "Ready")
if ready == nil then
  return {status = "Progressing", message = "waiting for the controller: no Ready condition yet"}
end
if ready.status ~= "True" then
  return {status = "Progressing", message = describe(ready)}
end

local turn = status.turn or 0
local inFlight = 0
local total = 0
if status.intents ~= nil then
  inFlight = status.intents.inFlight or 0
  total = status.intents.total or 0
end
return {status = "Progressing", message = "Running: turn " .. turn .. ", " .. inFlight .. " of " .. total .. " intents in flight"}
