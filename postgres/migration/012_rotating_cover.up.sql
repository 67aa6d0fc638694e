-- The full audit's rotating cover (SPEC §8, §14): each audit proves one slice of the collections against a
-- from-scratch evaluation, plus every collection with a group scanned since the previous proof. The audit's run
-- records what it proved and what it found, so the next audit takes the next slice and an operator can see when
-- each collection was last proven.
ALTER TABLE candidate_scan_run
    ADD COLUMN verify_slice       integer, -- the slice proven; NULL when the run proved nothing
    ADD COLUMN verify_slices      integer,
    ADD COLUMN verify_collections text[],  -- every collection proven: the slice's and those scanned since
    ADD COLUMN verify_groups      integer,
    ADD COLUMN verify_objects     integer,
    ADD COLUMN verify_gate_checks integer,
    ADD COLUMN verify_mismatches  integer,
    ADD COLUMN verified_at        timestamptz, -- the instant the reference was read at
    ADD CONSTRAINT candidate_scan_run_verify_slice_check
        CHECK (verify_slice IS NULL OR (verify_slices > 0 AND verify_slice >= 0 AND verify_slice < verify_slices));
