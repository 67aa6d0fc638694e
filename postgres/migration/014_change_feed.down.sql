-- Back to step 013.
DO $$
DECLARE
    t text;
BEGIN
    FOREACH t IN ARRAY ARRAY['governance_group', 'governance_candidate_state', 'governance_candidate_object',
                             'governance_candidate_coverage', 'governance_ruleset']
    LOOP
        EXECUTE format('DROP TRIGGER gcos_feed_insert ON %I', t);
        EXECUTE format('DROP TRIGGER gcos_feed_update ON %I', t);
        EXECUTE format('DROP TRIGGER gcos_feed_delete ON %I', t);
    END LOOP;
END $$;
DROP FUNCTION gcos_note_change();
DROP TABLE gcos_change_feed_horizon;
DROP TABLE gcos_change_feed;
