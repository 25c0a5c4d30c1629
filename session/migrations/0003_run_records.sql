-- One record per run that keeps one (an explore run: its options, summary
-- and progress, runs/exploration.Record as JSON), keyed by the run's
-- session; what `themisctl report --run S` draws afterwards. Pruned with
-- its session.
CREATE TABLE run_records (
    session TEXT PRIMARY KEY,
    kind    TEXT NOT NULL,
    record  BLOB NOT NULL,
    created INTEGER NOT NULL
);
