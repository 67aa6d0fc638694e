DROP TABLE governance_signal_key;
