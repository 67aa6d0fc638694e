-- One table again, each key once, at its earliest first sighting.
ALTER TABLE governance_signal_key RENAME TO governance_signal_key_generations;
ALTER INDEX governance_signal_key_pkey RENAME TO governance_signal_key_generations_pkey;
CREATE TABLE governance_signal_key (
    source_system  text        NOT NULL,
    event_type     text        NOT NULL,
    correlation_id text        NOT NULL,
    first_seen_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (source_system, event_type, correlation_id)
);
INSERT INTO governance_signal_key (source_system, event_type, correlation_id, first_seen_at)
    SELECT source_system, event_type, correlation_id, min(first_seen_at)
    FROM governance_signal_key_generations GROUP BY 1, 2, 3;
DROP TABLE governance_signal_key_generations;
DROP TABLE gcos_signal_key_generation;
