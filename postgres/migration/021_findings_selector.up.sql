-- "Every finding" (gcos notifications mute|subscribe --findings) selected the findings' announcements by their
-- subject table, system_issues. Since doc 41 §41.5 addresses candidate, input, backfill and coverage findings at the
-- rows they are about, it selects them by their transition (opened, reopened, resolved) instead. The governance
-- rows made with the old selector (a subject table of system_issues, which no other selector sets) are carried to
-- the new one; where the recipient already has the new row, the old one goes.
DELETE FROM event_subscription o
WHERE o.event_domain = 'governance' AND o.scope_subject_table = 'system_issues'
  AND EXISTS (SELECT 1 FROM event_subscription n
              WHERE n.recipient_ref = o.recipient_ref AND n.event_domain = o.event_domain
                AND n.event_type IS NOT DISTINCT FROM o.event_type AND n.event_stream IS NOT DISTINCT FROM o.event_stream
                AND n.scope_subject_table IS NULL AND n.mute = o.mute
                AND n.scope_filter = o.scope_filter || '{"transition": ["opened", "reopened", "resolved"]}');
UPDATE event_subscription
SET scope_subject_table = NULL,
    scope_filter = scope_filter || '{"transition": ["opened", "reopened", "resolved"]}'
WHERE event_domain = 'governance' AND scope_subject_table = 'system_issues';
