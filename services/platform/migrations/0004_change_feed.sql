-- The change feed: an append-only log of facts added, invalidated and superseded and of
-- claims ingested, read by the retrieval service's WatchChanges stream.
--
-- Positions are handed out in COMMIT order within a space. The triggers are deferred
-- constraint triggers, so they run as the transaction commits, after all its statements;
-- the first one takes a per-space transaction-level advisory lock, and every entry takes
-- the next value of a global sequence while holding it. The lock is released only after
-- the commit has become visible, so a transaction that gets a later position than another
-- in the same space always becomes visible after it: a reader that has seen position P of
-- a space will never later see a smaller position of that space appear. Readers therefore
-- simply read `pos > cursor ORDER BY pos` — nothing is skipped, nothing is read twice,
-- and no long-running transaction elsewhere holds the feed back. Positions may have gaps
-- (a transaction that aborts after its triggers ran); gaps are never waited for.
-- (A transaction writing to two spaces takes two locks in event order; no write path does.)

CREATE SEQUENCE change_log_pos AS bigint;

CREATE TABLE change_log (
    pos          bigint PRIMARY KEY,
    space_id     uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('relation', 'observation', 'claim')),
    change       text NOT NULL CHECK (change IN ('new', 'invalidated', 'superseded')),
    object_id    uuid NOT NULL,
    at           timestamptz NOT NULL,                              -- when it happened (the feed's `at`)
    recorded_at  timestamptz NOT NULL DEFAULT clock_timestamp()     -- when it got its position (retention)
);
CREATE INDEX change_log_space_pos ON change_log (space_id, pos);

-- Entries at or below `pruned_through` may have been deleted by retention: a cursor
-- below it can no longer be resumed from (the reader answers with an overrun).
CREATE TABLE change_log_horizon (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    pruned_through  bigint NOT NULL DEFAULT 0
);
INSERT INTO change_log_horizon DEFAULT VALUES;

CREATE FUNCTION change_log_append(p_space uuid, p_kind text, p_change text, p_object uuid, p_at timestamptz)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- Re-entrant within the transaction; two int4 keys, so it never collides with the
    -- bigint-keyed advisory locks of the pipeline and ingest.
    PERFORM pg_advisory_xact_lock(hashtext('testament.change_log'), hashtext(p_space::text));
    INSERT INTO change_log (pos, space_id, kind, change, object_id, at)
    VALUES (nextval('change_log_pos'), p_space, p_kind, p_change, p_object, p_at);
    -- Delivered at commit; identical payloads of one transaction are folded into one.
    PERFORM pg_notify('testament_changes', p_space::text);
END;
$$;

CREATE FUNCTION change_log_facts() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- NEW and OLD are the row versions of the event, even though the trigger fires at commit.
    IF TG_OP = 'INSERT' THEN
        PERFORM change_log_append(NEW.space_id, NEW.kind, 'new', NEW.fact_id, NEW.ingested_at);
        IF NEW.invalidated_at IS NOT NULL THEN
            PERFORM change_log_append(NEW.space_id, NEW.kind, 'invalidated', NEW.fact_id, NEW.invalidated_at);
        END IF;
        IF NEW.superseded_by IS NOT NULL THEN
            PERFORM change_log_append(NEW.space_id, NEW.kind, 'superseded', NEW.fact_id, clock_timestamp());
        END IF;
    ELSE
        IF OLD.invalidated_at IS NULL AND NEW.invalidated_at IS NOT NULL THEN
            PERFORM change_log_append(NEW.space_id, NEW.kind, 'invalidated', NEW.fact_id, NEW.invalidated_at);
        END IF;
        IF NEW.superseded_by IS NOT NULL AND NEW.superseded_by IS DISTINCT FROM OLD.superseded_by THEN
            PERFORM change_log_append(NEW.space_id, NEW.kind, 'superseded', NEW.fact_id, clock_timestamp());
        END IF;
    END IF;
    RETURN NULL;
END;
$$;

CREATE FUNCTION change_log_claims() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM change_log_append(NEW.space_id, 'claim', 'new', NEW.claim_id, NEW.ingested_at);
    RETURN NULL;
END;
$$;

CREATE CONSTRAINT TRIGGER change_log_facts_insert AFTER INSERT ON facts
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION change_log_facts();
-- The WHEN clause of a constraint trigger is evaluated when the row changes, not at commit.
CREATE CONSTRAINT TRIGGER change_log_facts_update AFTER UPDATE OF invalidated_at, superseded_by ON facts
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW
    WHEN ((OLD.invalidated_at IS NULL AND NEW.invalidated_at IS NOT NULL)
          OR (NEW.superseded_by IS NOT NULL AND NEW.superseded_by IS DISTINCT FROM OLD.superseded_by))
    EXECUTE FUNCTION change_log_facts();
CREATE CONSTRAINT TRIGGER change_log_claims_insert AFTER INSERT ON claims
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION change_log_claims();
