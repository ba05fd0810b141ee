-- Cancel a toolgate.dev AgentTask: set spec.cancel. The controller accepts no new intent
-- and marks the task Failed with reason Cancelled; a finished task stays finished even
-- if a later sync from git sets spec.cancel back to false.
if obj.spec.cancel == true then
  error("AgentTask " .. obj.metadata.name .. " is already cancelled")
end
obj.spec.cancel = true
return obj
