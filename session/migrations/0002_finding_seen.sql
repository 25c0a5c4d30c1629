-- One row per kind of finding across runs: the signature (kind, last op
-- kind, what differs), the lane specs and the policy it was judged under
-- (key); the first finding of it, when it was first and last seen, and in
-- how many sessions.
CREATE TABLE finding_seen (
    key          TEXT PRIMARY KEY,
    first_id     TEXT NOT NULL,
    first_seen   INTEGER NOT NULL,
    last_seen    INTEGER NOT NULL,
    last_session TEXT NOT NULL,
    times        INTEGER NOT NULL
);
