-- Argo CD health of a toolgate.dev Approval.
--
-- Pending is Suspended: Argo CD's word for "waits for a person". A decision, either way,
-- is the approval doing its job, so Approved, Consumed and Denied are Healthy. Expired
-- is Degraded: a request nobody answered in time is the one outcome of an approval that
-- somebody should look at (the intent itself records it as a refusal and stays Healthy).
-- Uses only Lua's base and table libraries, as Argo CD allows.
--
--   decided in spec but not yet seen by the controller -> Progressing
--   Pending (or no status yet, undecided)              -> Suspended
--   Approved, Consumed, Denied                         -> Healthy
--   Expired                                            -> Degraded
local spec = obj.spec or {}
local status = obj.status or {}
local decision = spec.decision or "Pending"
local state = status.state or "Pending"
local decidedBy = spec.decidedBy or "nobody"

local function approvers()
  local names = {}
  if spec.approvers ~= nil then
    for _, u in ipairs(spec.approvers.users or {}) do
      table.insert(names, u)
    end
    for _, g in ipairs(spec.approvers.groups or {}) do
      table.insert(names, "group " .. g)
    end
  end
  if #names == 0 then
    return "anyone with the approve verb"
  end
  return table.concat(names, ", ")
end

if state == "Pending" then
  if decision ~= "Pending" then
    return {status = "Progressing", message = decision .. " by " .. decidedBy .. "; waiting for the controller to act on it"}
  end
  return {status = "Suspended", message = "waiting for a decision by " .. approvers() .. " until " .. (spec.expiresAt or "it expires")}
end

local detail = ""
if status.message ~= nil and status.message ~= "" then
  detail = " (" .. status.message .. ")"
end
if state == "Approved" or state == "Consumed" then
  return {status = "Healthy", message = state .. ": approved by " .. decidedBy .. detail}
end
if state == "Denied" then
  local text = "Denied by " .. decidedBy
  if spec.comment ~= nil and spec.comment ~= "" then
    text = text .. ": " .. spec.comment
  end
  return {status = "Healthy", message = text}
end
if state == "Expired" then
  return {status = "Degraded", message = "Expired: nobody decided before " .. (spec.expiresAt or "the deadline") .. "; the intent was not executed"}
end
return {status = "Unknown", message = "unknown approval state " .. state}
