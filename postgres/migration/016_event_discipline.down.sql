-- Back to step 015.
DROP TABLE gcos_event_escalation;
DROP TABLE gcos_event_window;
DROP TABLE gcos_event_cooldown;
