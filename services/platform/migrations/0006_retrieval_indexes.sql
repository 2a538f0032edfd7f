-- Retrieval: the entity lift and the entity_ids filter go from claims and chunks to the
-- mentions of their claims ("which of these claims/chunks mention entity E?"). Without these
-- indexes each of those probes scans the space's claims or all mentions.
CREATE INDEX claims_chunk ON claims (chunk_id);
CREATE INDEX mentions_claim ON mentions (claim_id, resolved_entity_id);
