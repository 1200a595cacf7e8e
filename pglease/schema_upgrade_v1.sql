-- The upgrade of a pglease schema from version 1 to version 2, in place.
--
-- pglease.Migrate runs this file (embedded in the package), then
-- schema.sql, in one transaction under its advisory lock, when the
-- schema-version table says version 1. By hand, for the default table:
--
--     psql "$DSN" --single-transaction -v ON_ERROR_STOP=1 -f schema_upgrade_v1.sql -f schema.sql
--
-- The blocks keep their rows and claims. Their version 1 used_until goes:
-- the lease engine records its promises in signed records, and a plain
-- column would invite trust. The marker is NULL and fresh false, so the
-- first claim after the upgrade waits out the longest promise a version 1
-- holder can have recorded (TTL + MaxClockSkew, with the fleet's Horizon),
-- once. Version 1 processes still running fail their next renewal (the
-- column they write is gone) and stop at their lease end, which that wait
-- covers.
ALTER TABLE randflake_blocks ADD COLUMN IF NOT EXISTS record text;
ALTER TABLE randflake_blocks DROP COLUMN IF EXISTS used_until;
ALTER TABLE randflake_blocks_schema
    ADD COLUMN IF NOT EXISTS marker text,
    ADD COLUMN IF NOT EXISTS fresh boolean NOT NULL DEFAULT false;
UPDATE randflake_blocks_schema SET version = 2, marker = NULL, fresh = false, migrated_at = now() WHERE version = 1;
