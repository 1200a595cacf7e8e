-- The PostgreSQL schema of package pglease, version 2.
--
-- pglease.Migrate runs exactly this file (it is embedded in the package), in
-- one transaction, under an advisory lock, after checking that the schema is
-- absent or at this version (a version 1 schema is first upgraded by
-- schema_upgrade_v1.sql). To apply it by hand instead, for the default table
-- in the first schema of the search path:
--
--     psql "$DSN" --single-transaction -v ON_ERROR_STOP=1 -f schema.sql
--
-- For another table name, Config.Schema/Config.Table and
-- pglease.MigrateTable replace every word that starts with randflake_blocks
-- below: randflake_blocks and randflake_blocks_schema by the table and its
-- schema-version table, qualified with the schema, the constraint names by
-- the table name plus the same suffix. Running the file again changes
-- nothing.

-- One row per block of node IDs that was ever claimed. Rows are never
-- deleted: a block keeps its record after its holder is gone.
CREATE TABLE IF NOT EXISTS randflake_blocks (
    -- The block's node IDs, inclusive.
    first_node integer NOT NULL PRIMARY KEY,
    last_node  integer NOT NULL,
    -- The lease engine's record of the block, kept exactly as written: the
    -- newest second any holder may have put in an ID on it, signed under
    -- the fleet secret. NULL until the block's first promise.
    record     text,
    -- The current claim: the holder's description, a random token that
    -- only the holder knows, and when the claim lapses by this server's
    -- clock. All NULL while the block is free.
    holder     text,
    token      text,
    claimed_at timestamptz,
    expires_at timestamptz,
    CONSTRAINT randflake_blocks_nodes CHECK (0 <= first_node AND first_node <= last_node AND last_node <= 131071),
    CONSTRAINT randflake_blocks_claim CHECK ((token IS NULL) = (expires_at IS NULL)),
    -- No node ID is in two blocks, whatever block sizes processes use.
    CONSTRAINT randflake_blocks_disjoint EXCLUDE USING gist (int4range(first_node, last_node, '[]') WITH &&)
);

-- The schema version and the fleet's marker: one row. pglease refuses to
-- work on any other version than its own. Every step of every process
-- locks this row first, so the steps of the fleet run one at a time.
CREATE TABLE IF NOT EXISTS randflake_blocks_schema (
    single      boolean NOT NULL PRIMARY KEY DEFAULT true,
    version     integer NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now(),
    -- The lease engine's fleet marker, kept exactly as written: the node
    -- range and block size, the store's identity, and a digest of every
    -- record. NULL until the first claim.
    marker      text,
    -- True only when the tables were created from nothing (no ID can have
    -- been issued on them) and no marker was written since: the first
    -- claim then waits nothing. Any other table without a marker is
    -- unknown history, waited out once.
    fresh       boolean NOT NULL DEFAULT false,
    CONSTRAINT randflake_blocks_schema_single CHECK (single)
);

INSERT INTO randflake_blocks_schema (version, fresh)
SELECT 2, NOT EXISTS (SELECT FROM randflake_blocks)
ON CONFLICT (single) DO NOTHING;
