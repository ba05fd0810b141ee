-- Cancel a toolgate.dev AgentTask: set spec.lifecycle to Cancelled. The controller
-- accepts no new intent, stops the running calls and marks the task Failed with
-- reason Cancelled. The API server refuses to set it back (a later sync from git
-- that says Active is refused, and the Application stays OutOfSync until git says
-- Cancelled too).
if obj.spec.lifecycle == "Cancelled" then
  error("AgentTask " .. obj.metadata.name .. " is already cancelled")
end
obj.spec.lifecycle = "Cancelled"
return obj
