-- A user's word on a finding across runs (SetFindingStatus, themisctl
-- findings status): new, reported, fixed-upstream or expected, and when it
-- was said (0: never).
ALTER TABLE finding_seen ADD COLUMN status TEXT NOT NULL DEFAULT 'new';
ALTER TABLE finding_seen ADD COLUMN status_time INTEGER NOT NULL DEFAULT 0;
