-- Indexes for the list calls, which page in SQL by (created, id) keyset:
-- sessions (ListSessions --all), findings (ListFindings, all of them or one
-- session's). Without them every page scanned and sorted the whole table.
CREATE INDEX sessions_by_created ON sessions(created, id);
CREATE INDEX findings_by_created ON findings(created, id);
CREATE INDEX findings_by_session ON findings(session, created, id);
