-- Every tenant table is keyed by its space. A distributed PostgreSQL sharded by space_id
-- (Citus, deploy/SCALING.md) requires the distribution column in every primary key and
-- unique constraint, and a foreign key between two sharded tables must include it so that
-- parent and child rows live on the same node. So:
--
-- * every primary key and unique constraint of a tenant table that lacks space_id gets it
--   as its LAST column: the key is still unique (it only grew), and every lookup or join by
--   the old key keeps its index prefix (chunk_id = $1 still reads chunks_pkey), so no plan
--   changes and no second index on the bare id is needed;
-- * every foreign key between two tenant tables becomes composite, (space_id, x_id)
--   REFERENCES parent (space_id, id), with its ON DELETE / ON UPDATE actions, match type
--   and deferrability kept. SET NULL and SET DEFAULT clear only the reference column, never
--   space_id. The constraints keep their names.
--
-- `spaces` and `credentials` stay as they are: both are read before a caller's space is known
-- (the key's hash finds the credential and so the space) and become reference tables, copied
-- to every node. Tables keyed by space already (content_objects, bm25_postings, ...) and the
-- global ones (schema_migrations, change_log_horizon) are untouched.
--
-- It runs on a populated database in one transaction (the migration runner's): every write
-- path gives a child row its parent's space, so existing rows satisfy the composite keys;
-- were one not to, its foreign key's validation fails and nothing is applied.
-- (tests/e2e/test_schema_distribution.py migrates a processed two-space database.)

-- A provider call outside any space's work could never be read by any caller (cost receipts
-- are per space); the ledger no longer writes one, and space_id joins the key.
DELETE FROM provider_calls WHERE space_id IS NULL;
ALTER TABLE provider_calls ALTER COLUMN space_id SET NOT NULL;

DO $$
DECLARE
    tenant oid[];
    fk record;
    r record;
    fks text[][] := '{}';
    i integer;
BEGIN
    SELECT array_agg(c.oid) INTO tenant
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'space_id' AND NOT a.attisdropped
     WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND c.relname NOT IN ('spaces', 'credentials');

    -- A unique index that backs no constraint cannot be rewritten from its definition here;
    -- there is none today, and a future one must carry space_id itself.
    FOR r IN SELECT x.indexrelid::regclass AS name
               FROM pg_index x
              WHERE x.indisunique AND x.indrelid = ANY(tenant)
                AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = x.indexrelid)
                AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = x.indrelid
                                   AND a.attname = 'space_id' AND a.attnum = ANY(x.indkey))
    LOOP
        RAISE EXCEPTION 'unique index % lacks space_id', r.name;
    END LOOP;

    -- 1. Take off the foreign keys between tenant tables that lack space_id, keeping their
    --    definitions rewritten as composite keys.
    FOR fk IN SELECT f.conname, f.conrelid::regclass AS child, pg_get_constraintdef(f.oid) AS def,
                     f.confupdtype
                FROM pg_constraint f
               WHERE f.contype = 'f' AND f.conrelid = ANY(tenant) AND f.confrelid = ANY(tenant)
                 AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = f.conrelid
                                    AND a.attname = 'space_id' AND a.attnum = ANY(f.conkey))
               ORDER BY f.conrelid::regclass::text, f.conname
    LOOP
        IF fk.confupdtype IN ('n', 'd') THEN
            RAISE EXCEPTION 'foreign key % on %: ON UPDATE SET NULL/DEFAULT cannot name its columns', fk.conname, fk.child;
        END IF;
        fks := fks || ARRAY[[fk.child::text, fk.conname::text, regexp_replace(regexp_replace(fk.def,
            -- FOREIGN KEY (a) REFERENCES p(b) ... -> FOREIGN KEY (space_id, a) REFERENCES p(space_id, b) ...
            '^FOREIGN KEY \(([^)]*)\) REFERENCES ([^(]+)\(([^)]*)\)',
            'FOREIGN KEY (space_id, \1) REFERENCES \2(space_id, \3)'),
            -- ON DELETE SET NULL -> ON DELETE SET NULL (a): never clear space_id
            'ON DELETE (SET NULL|SET DEFAULT)(?! \()',
            'ON DELETE \1 (' || substring(fk.def FROM '^FOREIGN KEY \(([^)]*)\)') || ')')]];
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', fk.child, fk.conname);
    END LOOP;

    -- 2. Re-key: space_id joins every primary key and unique constraint that lacks it.
    FOR r IN SELECT c.conname, c.conrelid::regclass AS tbl, pg_get_constraintdef(c.oid) AS def
               FROM pg_constraint c
              WHERE c.contype IN ('p', 'u') AND c.conrelid = ANY(tenant)
                AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.conrelid
                                   AND a.attname = 'space_id' AND a.attnum = ANY(c.conkey))
              ORDER BY c.conrelid::regclass::text, c.conname
    LOOP
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', r.tbl, r.conname);
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', r.tbl, r.conname,
                       regexp_replace(r.def, '^(PRIMARY KEY|UNIQUE NULLS NOT DISTINCT|UNIQUE) \(([^)]*)\)',
                                      '\1 (\2, space_id)'));
    END LOOP;

    -- 3. Put the foreign keys back, composite; each is validated against the existing rows.
    FOR i IN 1 .. coalesce(array_length(fks, 1), 0) LOOP
        EXECUTE format('ALTER TABLE %s ADD CONSTRAINT %I %s', fks[i][1], fks[i][2], fks[i][3]);
    END LOOP;
END
$$;

