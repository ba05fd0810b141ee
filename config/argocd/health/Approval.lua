-- Argo CD health of a toolgate.dev Approval.
--
-- Pending is Suspended: Argo CD's word for "waits for a person". A decision, either way,
-- is the approval doing its job, so Approved, Consumed and Denied are Healthy. Expired
-- is Degraded: a request nobody answered in time is the one outcome of an approval that
-- somebody should look at (the intent itself records it as a refusal and stays Healthy).
-- The votes are counted by the controller (status.tally, approvedBy, deniedBy); this
-- script only reads its count. Uses only Lua's base and table libraries, as Argo CD
-- allows.
--
--   a vote the controller has not counted yet (generation) -> Progressing
--   Pending (or no status yet)                             -> Suspended
--   Approved, Consumed, Denied                             -> Healthy
--   Expired                                                -> Degraded
local spec = obj.spec or {}
local status = obj.status or {}
local state = status.state or "Pending"
local approvedBy = table.concat(status.approvedBy or {}, ", ")
if approvedBy == "" then
  approvedBy = "nobody"
end

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
  local votes = spec.votes or {}
  if #votes > 0 and (status.observedGeneration or 0) < (obj.metadata.generation or 0) then
    return {status = "Progressing", message = "a vote by " .. votes[#votes].user .. " is waiting for the controller to count it"}
  end
  local tally = ""
  if status.tally ~= nil and status.tally ~= "" then
    tally = " (approvals " .. status.tally .. ", approved by " .. approvedBy .. ")"
  end
  return {status = "Suspended", message = "waiting for a decision by " .. approvers() .. " until " .. (spec.expiresAt or "it expires") .. tally}
end

local detail = ""
if status.message ~= nil and status.message ~= "" then
  detail = " (" .. status.message .. ")"
end
if state == "Approved" or state == "Consumed" then
  return {status = "Healthy", message = state .. ": approved by " .. approvedBy .. detail}
end
if state == "Denied" then
  local deniedBy = status.deniedBy or "nobody"
  local text = "Denied by " .. deniedBy
  for _, v in ipairs(spec.votes or {}) do
    if v.user == deniedBy and v.comment ~= nil and v.comment ~= "" then
      text = text .. ": " .. v.comment
    end
  end
  return {status = "Healthy", message = text}
end
if state == "Expired" then
  return {status = "Degraded", message = "Expired: nobody decided before " .. (spec.expiresAt or "the deadline") .. "; the intent was not executed"}
end
return {status = "Unknown", message = "unknown approval state " .. state}
