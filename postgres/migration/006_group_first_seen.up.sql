-- The event-mode scan looks for groups first seen since the current ruleset took effect (the only ones that can
-- lack a candidate row under it); this index keeps that look proportional to the new groups, not to all groups.
CREATE INDEX governance_group_first_seen_idx ON governance_group (first_seen_at);
