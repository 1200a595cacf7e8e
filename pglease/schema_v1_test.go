package pglease

// schemaV1 is schema.sql as version 1 of this package shipped it (before
// the records and the marker replaced used_until): what TestMigrateFromV1
// upgrades. It must not change.
const schemaV1 = `-- The PostgreSQL schema of package pglease, version 1.
--
-- pglease.Migrate runs exactly this file (it is embedded in the package), in
-- one transaction, under an advisory lock, after checking that the schema is
-- absent or at this version. To apply it by hand instead, for the default
-- table in the first schema of the search path:
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
-- deleted: a block keeps its used_until second after its holder is gone.
CREATE TABLE IF NOT EXISTS randflake_blocks (
    -- The block's node IDs, inclusive.
    first_node integer NOT NULL PRIMARY KEY,
    last_node  integer NOT NULL,
    -- The newest Unix second any holder of the block may have put in an
    -- ID: its promise while held (written before the holder may use a
    -- second), the newest second it used after a clean release. The next
    -- holder starts strictly after it.
    used_until bigint  NOT NULL,
    -- The current claim: the holder's description, a random token that
    -- only the holder knows, and when the claim lapses by this server's
    -- clock. All NULL while the block is free.
    holder     text,
    token      text,
    claimed_at timestamptz,
    expires_at timestamptz,
    CONSTRAINT randflake_blocks_nodes CHECK (0 <= first_node AND first_node <= last_node AND last_node <= 131071),
    -- The lifetime of Randflake IDs: 1730000000 (the epoch) to 2803741823.
    CONSTRAINT randflake_blocks_used CHECK (used_until BETWEEN 1730000000 AND 2803741823),
    CONSTRAINT randflake_blocks_claim CHECK ((token IS NULL) = (expires_at IS NULL)),
    -- No node ID is in two blocks, whatever block sizes processes use.
    CONSTRAINT randflake_blocks_disjoint EXCLUDE USING gist (int4range(first_node, last_node, '[]') WITH &&)
);

-- The schema version: one row. pglease refuses to work on any other
-- version than its own.
CREATE TABLE IF NOT EXISTS randflake_blocks_schema (
    single      boolean NOT NULL PRIMARY KEY DEFAULT true,
    version     integer NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT randflake_blocks_schema_single CHECK (single)
);

INSERT INTO randflake_blocks_schema (version) VALUES (1) ON CONFLICT (single) DO NOTHING;
`
