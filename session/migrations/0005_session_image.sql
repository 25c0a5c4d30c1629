-- The guest image a session booted (guest.Ref as JSON: key, kernel
-- version, flavour, patches and module sources); '' for sessions recorded
-- before it was kept.
ALTER TABLE sessions ADD COLUMN image TEXT NOT NULL DEFAULT '';
