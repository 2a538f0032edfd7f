-- Retrieval units: one vector per conversation turn or document block of a chunk.
-- A chunk holds several turns (about three); one vector of all of them dilutes the meaning
-- of each. The semantic chunk leg searches these vectors beside the chunks' own and scores
-- a chunk by its best unit and its whole text together.

-- Keyed like every tenant table since 0009: space_id in the key, a composite foreign key.
CREATE TABLE chunk_units (
    chunk_id         uuid NOT NULL,
    ordinal          integer NOT NULL CHECK (ordinal >= 0),
    space_id         uuid NOT NULL,
    embedding        vector NOT NULL,
    embedding_dim    integer NOT NULL,
    embedding_model  text NOT NULL,
    PRIMARY KEY (chunk_id, ordinal, space_id),
    FOREIGN KEY (chunk_id, space_id) REFERENCES chunks (chunk_id, space_id) ON DELETE CASCADE
);
CREATE INDEX chunk_units_hnsw_384 ON chunk_units USING hnsw ((embedding::halfvec(384)) halfvec_cosine_ops)
    WHERE embedding_dim = 384;
CREATE INDEX chunk_units_hnsw_768 ON chunk_units USING hnsw ((embedding::halfvec(768)) halfvec_cosine_ops)
    WHERE embedding_dim = 768;
CREATE INDEX chunk_units_hnsw_1536 ON chunk_units USING hnsw ((embedding::halfvec(1536)) halfvec_cosine_ops)
    WHERE embedding_dim = 1536;
CREATE INDEX chunk_units_space ON chunk_units (space_id, embedding_dim);

-- Chunks embedded before this migration keep being found: each gets one unit, its whole
-- vector, until `testament ops reembed` splits it into its turns and blocks.
INSERT INTO chunk_units (chunk_id, ordinal, space_id, embedding, embedding_dim, embedding_model)
SELECT chunk_id, 0, space_id, embedding, embedding_dim, embedding_model FROM chunks WHERE embedding IS NOT NULL;
