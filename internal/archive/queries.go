package archive

// The queries a security team runs against the archive (docs/archive.md shows them;
// queries_test.go runs them against real records). Each reads through an index:
// records_namespace for the time range, records_body (jsonb_path_ops) for @>.
const (
	// QueryApprovedCallsOf: every call an agent ($2, the intent's requestedBy) made in
	// namespace $1 that a human approved, in the last $3 days, newest first, with who
	// approved it.
	QueryApprovedCallsOf = `SELECT name, task, recorded_at,
       (SELECT string_agg(u, ', ') FROM jsonb_array_elements_text(body->'approval'->'status'->'approvedBy') u) AS approved_by,
       body->'intent'->'spec'->'input' AS input
  FROM records
 WHERE kind = 'Call' AND namespace = $1
   AND recorded_at > now() - make_interval(days => $3)
   AND body @> jsonb_build_object('intent', jsonb_build_object('spec', jsonb_build_object('requestedBy', $2::text)),
                                  'approval', '{"status": {"state": "Consumed"}}'::jsonb)
 ORDER BY recorded_at DESC, seq DESC
 LIMIT 500`

	// QueryDeniesBy: every call of namespace $1 denied by rule $4 of policy $3 (of kind
	// $2: ToolPolicy or ClusterToolPolicy), newest first.
	QueryDeniesBy = `SELECT name, task, recorded_at,
       body->'intent'->'status'->'decision'->>'reason' AS reason
  FROM records
 WHERE kind = 'Call' AND namespace = $1
   AND body @> jsonb_build_object('intent', jsonb_build_object('status', jsonb_build_object('decision',
         jsonb_build_object('action', 'Deny', 'policyRuleRef', jsonb_build_object('kind', $2::text, 'name', $3::text, 'rule', $4::text)))))
 ORDER BY recorded_at DESC, seq DESC
 LIMIT 500`
)
