-- Themis ledger, schema version 1. Times are Unix nanoseconds (0: unset).
CREATE TABLE sessions (
    id           TEXT PRIMARY KEY,
    state        TEXT NOT NULL,
    lanes        TEXT NOT NULL, -- JSON [{"name","spec","fs"}]
    backend      TEXT NOT NULL,
    memory_mib   INTEGER NOT NULL,
    restore_mode TEXT NOT NULL,
    verify       INTEGER NOT NULL,
    created      INTEGER NOT NULL,
    ended        INTEGER NOT NULL DEFAULT 0,
    reason       TEXT NOT NULL DEFAULT ''
);

CREATE TABLE checkpoints (
    session       TEXT NOT NULL REFERENCES sessions(id),
    id            TEXT NOT NULL,
    seq           INTEGER NOT NULL, -- n of "c-<n>", for ordering
    parent        TEXT NOT NULL,
    name          TEXT NOT NULL,
    origin        TEXT NOT NULL,
    slot          INTEGER NOT NULL,
    created       INTEGER NOT NULL,
    roots         TEXT NOT NULL, -- JSON {"lane": base64 root}
    overlay_depth INTEGER NOT NULL,
    live          INTEGER NOT NULL,
    PRIMARY KEY (session, id)
);

CREATE TABLE events (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    session    TEXT NOT NULL,
    time       INTEGER NOT NULL,
    kind       TEXT NOT NULL,
    detail     TEXT NOT NULL,
    results    TEXT NOT NULL, -- JSON [LaneResult]
    checkpoint TEXT NOT NULL
);
CREATE INDEX events_by_session ON events(session, seq);

-- Findings of the checker (not written yet).
CREATE TABLE findings (
    id      TEXT PRIMARY KEY,
    session TEXT NOT NULL,
    kind    TEXT NOT NULL,
    detail  TEXT NOT NULL,
    seed    INTEGER NOT NULL,
    ops     TEXT NOT NULL, -- JSON
    created INTEGER NOT NULL
);
