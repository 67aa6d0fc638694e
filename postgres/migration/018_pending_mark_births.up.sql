-- A pending birth mark is settled by the count that read its births (SPEC §8). A scan counts the births the tail
-- has not handed off yet from the source, so under a births load it usually counts a birth before the handoff that
-- marks the birth's groups: judged by time alone (counted_at), such a mark was owed and the group scanned again for
-- nothing. So a count records which of those births it read, and a mark carries the births behind it.

-- counted_births: the ids of the births after the births cursor that the count read for the row's base group (the
-- births up to the cursor were handed off before it, so counted_at settles those). NULL: not known (no count read,
-- no births cursor, or more births than are recorded).
ALTER TABLE governance_candidate_state ADD COLUMN counted_births bigint[];

-- births: for each key, in group_keys' order, the ids ('{1,2}') of the births whose handoff marked it, when births
-- alone marked it; NULL otherwise (the mark is settled by time only).
ALTER TABLE governance_pending_mark ADD COLUMN births text[]
    CHECK (births IS NULL OR cardinality(births) = cardinality(group_keys));

-- Whether a row written under a count (counted_at, or its scan_time; counted_births) includes a membership mark
-- (marked_at; births): the count began after the mark (the marking transaction read the change before it stamped
-- marked_at), or it read every birth behind the mark and no object of the group's base is still queued for its
-- object row (objects_queued: the handoff queues a birth's object in the marking transaction, and only a scan that
-- takes the queue afterwards derives its row). The one rule of settling (ApplyPendingMarks) and of the view.
CREATE FUNCTION gcos_mark_counted(counted_at timestamptz, scan_time timestamptz, counted_births bigint[],
                                  marked_at timestamptz, births text, objects_queued boolean) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN coalesce(counted_at, scan_time) >= marked_at
    OR (NOT objects_queued AND coalesce(births::bigint[] <@ counted_births, false));

-- Whether an object of the group's base is queued for its object row (governance_object_pending).
CREATE FUNCTION gcos_objects_queued(key text) RETURNS boolean
LANGUAGE sql STABLE PARALLEL SAFE
RETURN EXISTS (SELECT 1 FROM governance_group g JOIN governance_object_pending p
               ON p.object_class = g.object_class AND p.source_registry = g.source_registry AND p.lifecycle_status = g.lifecycle_status
               WHERE g.group_key = key);

CREATE OR REPLACE VIEW v_pending_mark_owed AS
SELECT DISTINCT c.group_key, c.ruleset_version
FROM governance_pending_mark p
CROSS JOIN LATERAL unnest(p.group_keys, p.marked_at, p.births) AS u(group_key, marked_at, births)
JOIN governance_candidate_state c ON c.group_key = u.group_key AND c.ruleset_version = p.ruleset_version
WHERE NOT c.dirty
  AND NOT gcos_mark_counted(c.counted_at, c.scan_time, c.counted_births, u.marked_at, u.births, gcos_objects_queued(c.group_key));
