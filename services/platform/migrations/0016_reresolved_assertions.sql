-- The assertions a version's re-resolution reopened (services/pipeline/adapters/reresolution.py)
-- are found again by that version's label stage, which embeds the facts they made. Without an
-- index that lookup read every assertion of every space once per version; almost no assertion
-- carries the key, so the partial index stays tiny.
CREATE INDEX assertions_reresolved_by ON assertions (space_id, (features->>'reresolved_by'))
    WHERE features ? 'reresolved_by';
