-- Back to step 020: "every finding" selects the announcements whose subject table is system_issues again.
UPDATE event_subscription
SET scope_subject_table = 'system_issues', scope_filter = scope_filter - 'transition'
WHERE event_domain = 'governance' AND scope_subject_table IS NULL
  AND scope_filter -> 'transition' = '["opened", "reopened", "resolved"]';
