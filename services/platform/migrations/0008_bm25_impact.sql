-- BM25 at scale. Until now every lexical query recounted its space's statistics (N, average
-- length, each term's document frequency) and scored every posting of every query term
-- before the limit: linear in the corpus. Now:
--
-- * the statistics are counters kept by the writers' own transactions (statement triggers
--   on the postings and lengths), sharded by transaction so that concurrent writers of
--   one space rarely touch the same counter row (each transaction only ever locks rows of
--   its own shard); a reader sums at most 64 rows per term;
-- * each posting carries its target's length, and an index orders a term's postings by an
--   impact bound, so a top-k query reads a bounded prefix of each term's postings and
--   proves (threshold algorithm) that no unread posting could enter the top k.
--
-- The scores are unchanged: still Okapi BM25 with the live N, average length and df.

-- Postings carry their target's length: scoring needs no join to bm25_docs.
ALTER TABLE bm25_postings ADD COLUMN length integer;
UPDATE bm25_postings p SET length = d.length
  FROM bm25_docs d WHERE d.target_kind = p.target_kind AND d.target_id = p.target_id;
UPDATE bm25_postings SET length = 0 WHERE length IS NULL;
ALTER TABLE bm25_postings ALTER COLUMN length SET NOT NULL;
ALTER TABLE bm25_postings ADD CONSTRAINT bm25_postings_length CHECK (length >= 0);

-- The term-frequency part of Okapi BM25 (k1 = 1.2, b = 0.75) against a fixed reference
-- length per kind. With the live average length A, a posting's true part is at most
-- impact * max(1, A / reference): the bound a reader uses for what it has not read.
-- Changing these numbers needs a new index (and the reader's REFERENCE_LENGTHS).
-- Float arithmetic throughout (numeric would cost microseconds a row).
CREATE FUNCTION bm25_impact(kind text, tf integer, length integer) RETURNS double precision
    LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
    RETURN tf * 2.2::float8 / (tf + 1.2::float8 * (0.25::float8 + 0.75::float8 * length
        / CASE kind WHEN 'claim' THEN 16::float8 WHEN 'chunk' THEN 64::float8 WHEN 'fact' THEN 8::float8
                    ELSE 32::float8 END));

CREATE INDEX bm25_postings_impact ON bm25_postings
    (space_id, target_kind, term, bm25_impact(target_kind, tf, length) DESC) INCLUDE (target_id, tf, length);

-- Counters: no foreign key to spaces, because a space's cascade deletes postings and the
-- triggers below then write to the counters in the same statement.
CREATE TABLE bm25_stats (
    space_id      uuid NOT NULL,
    target_kind   text NOT NULL,
    shard         smallint NOT NULL,
    n             bigint NOT NULL,
    total_length  bigint NOT NULL,
    PRIMARY KEY (space_id, target_kind, shard)
);
CREATE TABLE bm25_df (
    space_id     uuid NOT NULL,
    target_kind  text NOT NULL,
    term         text NOT NULL,
    shard        smallint NOT NULL,
    df           bigint NOT NULL,
    PRIMARY KEY (space_id, target_kind, term, shard)
);

-- A transaction's shard: all its counter updates go to one of 64 rows per counter, so two
-- writers wait for each other (or deadlock, then retry) only when their transactions share
-- a shard and a term: about one pair in 64 instead of every pair.
CREATE FUNCTION bm25_shard() RETURNS smallint LANGUAGE sql VOLATILE
    RETURN (txid_current() % 64)::smallint;

-- One function per event: a transition table exists only for the event that names it.
CREATE FUNCTION bm25_docs_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bm25_stats AS s (space_id, target_kind, shard, n, total_length)
    SELECT space_id, target_kind, bm25_shard(), count(*), sum(length)
      FROM new_rows GROUP BY space_id, target_kind ORDER BY space_id, target_kind
    ON CONFLICT (space_id, target_kind, shard)
    DO UPDATE SET n = s.n + EXCLUDED.n, total_length = s.total_length + EXCLUDED.total_length;
    RETURN NULL;
END;
$$;

CREATE FUNCTION bm25_docs_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bm25_stats AS s (space_id, target_kind, shard, n, total_length)
    SELECT space_id, target_kind, bm25_shard(), -count(*), -sum(length)
      FROM old_rows GROUP BY space_id, target_kind ORDER BY space_id, target_kind
    ON CONFLICT (space_id, target_kind, shard)
    DO UPDATE SET n = s.n + EXCLUDED.n, total_length = s.total_length + EXCLUDED.total_length;
    RETURN NULL;
END;
$$;

CREATE FUNCTION bm25_docs_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bm25_stats AS s (space_id, target_kind, shard, n, total_length)
    SELECT space_id, target_kind, bm25_shard(), 0, sum(dl)
      FROM (SELECT space_id, target_kind, length AS dl FROM new_rows
            UNION ALL SELECT space_id, target_kind, -length FROM old_rows) d
     GROUP BY space_id, target_kind ORDER BY space_id, target_kind
    ON CONFLICT (space_id, target_kind, shard) DO UPDATE SET total_length = s.total_length + EXCLUDED.total_length;
    RETURN NULL;
END;
$$;

-- Terms in one order in every statement, so two writers on one shard lock counters alike.
CREATE FUNCTION bm25_postings_added() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bm25_df AS s (space_id, target_kind, term, shard, df)
    SELECT space_id, target_kind, term, bm25_shard(), count(*)
      FROM new_rows GROUP BY space_id, target_kind, term ORDER BY space_id, target_kind, term
    ON CONFLICT (space_id, target_kind, term, shard) DO UPDATE SET df = s.df + EXCLUDED.df;
    RETURN NULL;
END;
$$;

CREATE FUNCTION bm25_postings_removed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bm25_df AS s (space_id, target_kind, term, shard, df)
    SELECT space_id, target_kind, term, bm25_shard(), -count(*)
      FROM old_rows GROUP BY space_id, target_kind, term ORDER BY space_id, target_kind, term
    ON CONFLICT (space_id, target_kind, term, shard) DO UPDATE SET df = s.df + EXCLUDED.df;
    RETURN NULL;
END;
$$;

CREATE TRIGGER bm25_docs_added AFTER INSERT ON bm25_docs REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_docs_added();
CREATE TRIGGER bm25_docs_removed AFTER DELETE ON bm25_docs REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_docs_removed();
CREATE TRIGGER bm25_docs_changed AFTER UPDATE ON bm25_docs REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_docs_changed();
CREATE TRIGGER bm25_postings_added AFTER INSERT ON bm25_postings REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_postings_added();
CREATE TRIGGER bm25_postings_removed AFTER DELETE ON bm25_postings REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION bm25_postings_removed();

-- Recount one space from its rows: for loaders that bypass triggers (bulk COPY with
-- session_replication_role = replica) and for this migration's backfill.
CREATE FUNCTION bm25_recount(space uuid) RETURNS void LANGUAGE sql BEGIN ATOMIC
    DELETE FROM bm25_stats WHERE space_id = space;
    DELETE FROM bm25_df WHERE space_id = space;
    INSERT INTO bm25_stats (space_id, target_kind, shard, n, total_length)
    SELECT space_id, target_kind, 0, count(*), sum(length) FROM bm25_docs WHERE space_id = space
     GROUP BY space_id, target_kind;
    INSERT INTO bm25_df (space_id, target_kind, term, shard, df)
    SELECT space_id, target_kind, term, 0, count(*) FROM bm25_postings WHERE space_id = space
     GROUP BY space_id, target_kind, term;
END;

SELECT bm25_recount(space_id) FROM spaces;

-- Every principal that has appeared in an ACL of the space (never removed: a superset is
-- harmless). A caller holding thousands of principals is narrowed to those that can match
-- a document before its principals enter any query (an array overlap costs the product of
-- the two lengths, on every document checked).
CREATE TABLE acl_principals (
    space_id   uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    principal  text NOT NULL,
    PRIMARY KEY (space_id, principal)
);
CREATE FUNCTION acl_principals_noted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO acl_principals (space_id, principal)
    SELECT DISTINCT space_id, unnest(acl) FROM new_rows ORDER BY 1, 2 ON CONFLICT DO NOTHING;
    RETURN NULL;
END;
$$;
CREATE TRIGGER documents_acl_inserted AFTER INSERT ON documents REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION acl_principals_noted();
CREATE TRIGGER documents_acl_updated AFTER UPDATE ON documents REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION acl_principals_noted();
INSERT INTO acl_principals (space_id, principal)
SELECT DISTINCT space_id, unnest(acl) FROM documents ON CONFLICT DO NOTHING;
