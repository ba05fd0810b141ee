-- Argo CD health of a toolgate.dev ToolPolicy or ClusterToolPolicy.
--
-- Ready=True means every rule compiled and every example passed, so the policy is used.
-- Ready=False means it is not used: a policy from git that does not compile is a broken
-- deployment, so it is Degraded with the controller's message (it names the rule).
-- Uses only Lua's base and table libraries, as Argo CD allows.
--
--   no status, or status.observedGeneration < metadata.generation -> Progressing
--   Ready=True  -> Healthy
--   Ready=False -> Degraded
local status = obj.status
if status == nil or status.conditions == nil then
  return {status = "Progressing", message = "waiting for the controller to compile the policy"}
end
local generation = obj.metadata.generation
local observed = status.observedGeneration or 0
if generation ~= nil and observed < generation then
  return {status = "Progressing", message = "waiting for the controller: status describes generation " .. observed .. ", the spec is at generation " .. generation}
end
for _, c in ipairs(status.conditions) do
  if c.type == "Ready" then
    local text = c.reason
    if c.message ~= nil and c.message ~= "" then
      text = text .. ": " .. c.message
    end
    if c.status == "True" then
      return {status = "Healthy", message = text}
    end
    if c.status == "False" then
      return {status = "Degraded", message = text}
    end
    return {status = "Progressing", message = text}
  end
end
return {status = "Progressing", message = "waiting for the controller to compile the policy"}
