-- Argo CD health of a toolgate.dev ToolIntent.
--
-- An intent ends with an observation (status.observation.outcome). A refusal
-- (ValidationFailed, Denied, ApprovalDenied, ApprovalExpired) is the governance working
-- as designed: nothing ran, the model is told why, so the intent is Healthy with the
-- reason as message. Only a call that ran and went wrong (Failed, TimedOut, Aborted) is
-- Degraded. Uses only Lua's base and table libraries, as Argo CD allows.
--
--   no status                          -> Progressing
--   outcome Succeeded                  -> Healthy
--   outcome Failed, TimedOut, Aborted  -> Degraded
--   outcome is a refusal               -> Healthy ("nothing was executed: ...")
--   outcome Redirected                 -> Healthy (a rule sent the model an instruction
--                                         instead; nothing of the turn ran)
--   outcome Stopped                    -> Degraded (a Stop rule ended the task; nothing
--                                         of the turn ran)
--   waiting for a human (Approved=False/ApprovalPending), or held because a sibling
--   of its turn waits for one (Executed=False/WaitingForSiblings) -> Suspended
--   otherwise                          -> Progressing
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

local function message(c, fallback)
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    return c.message
  end
  return fallback
end

local status = obj.status
if status == nil or (status.conditions == nil and status.observation == nil) then
  return {status = "Progressing", message = "waiting for the controller: the intent has no status yet"}
end
local conditions = status.conditions
local observation = status.observation

if observation ~= nil then
  local outcome = observation.outcome
  if outcome == "Succeeded" or outcome == "Failed" or outcome == "TimedOut" or outcome == "Aborted" then
    local text = outcome
    if observation.exitCode ~= nil then
      text = text .. " (exit code " .. observation.exitCode .. ")"
    end
    text = text .. ": " .. message(condition(conditions, "Executed"), "the tool ran")
    if outcome == "Succeeded" then
      return {status = "Healthy", message = text}
    end
    return {status = "Degraded", message = text}
  end
  local why = nil
  if outcome == "Stopped" then
    return {status = "Degraded", message = "Stopped, nothing was executed: " .. message(condition(conditions, "Executed"), "a Stop rule ended the task")}
  end
  if outcome == "ValidationFailed" then
    why = condition(conditions, "Validated")
  elseif outcome == "Redirected" then
    why = condition(conditions, "Executed")
  elseif outcome == "Denied" then
    why = condition(conditions, "Decided")
  else
    why = condition(conditions, "Approved")
  end
  return {status = "Healthy", message = outcome .. ", nothing was executed: " .. message(why, "see status.observation.summary")}
end

local approved = condition(conditions, "Approved")
if approved ~= nil and approved.status == "False" and approved.reason == "ApprovalPending" then
  return {status = "Suspended", message = message(approved, "waiting for a human decision")}
end
local executed = condition(conditions, "Executed")
if executed ~= nil and executed.status == "False" and executed.reason == "WaitingForSiblings" then
  return {status = "Suspended", message = message(executed, "held while a sibling waits for a human")}
end
if executed ~= nil then
  return {status = "Progressing", message = message(executed, executed.reason)}
end
local decided = condition(conditions, "Decided")
if decided ~= nil then
  return {status = "Progressing", message = message(decided, decided.reason)}
end
return {status = "Progressing", message = "validating and deciding"}
