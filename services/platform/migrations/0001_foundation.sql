-- Foundation: spaces (tenants), credentials, documents, versions, content objects and
-- the durable work queue. Every row that belongs to a tenant carries space_id.

CREATE EXTENSION IF NOT EXISTS vector;
CREATE EXTENSION IF NOT EXISTS pg_trgm;
CREATE EXTENSION IF NOT EXISTS fuzzystrmatch;
CREATE EXTENSION IF NOT EXISTS unaccent;

-- A space is a hard tenant boundary (RememberStack's deployment_id on the wire).
CREATE TABLE spaces (
    space_id    uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    slug        text NOT NULL UNIQUE CHECK (slug ~ '^[a-z][a-z0-9-]{0,62}$'),
    name        text NOT NULL,
    is_default  boolean NOT NULL DEFAULT false,
    created_at  timestamptz NOT NULL DEFAULT now()
);
-- Exactly one space serves callers of an open (keyless) stack.
CREATE UNIQUE INDEX spaces_single_default ON spaces (is_default) WHERE is_default;
INSERT INTO spaces (slug, name, is_default) VALUES ('default', 'Default space', true);

-- API keys. Only the SHA-256 of a key is stored. A key is bound to one space, one scope
-- and a list of principals; a trusted key sees every document of its space.
CREATE TABLE credentials (
    credential_id  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id       uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    key_hash       bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    key_prefix     text NOT NULL,
    label          text NOT NULL DEFAULT '',
    scope          text NOT NULL CHECK (scope IN ('read', 'ingest', 'write')),
    principals     text[] NOT NULL DEFAULT '{}',
    trusted        boolean NOT NULL DEFAULT false,
    created_at     timestamptz NOT NULL DEFAULT now(),
    revoked_at     timestamptz
);
CREATE INDEX credentials_space ON credentials (space_id);

-- Original bytes, stored once per SHA-256 in the object store. Rows are per space so
-- that the first-write-wins MIME of one tenant never shows through to another; the
-- object itself is shared (content addressed), which no caller can observe.
CREATE TABLE content_objects (
    space_id      uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    content_hash  text NOT NULL CHECK (content_hash ~ '^[0-9a-f]{64}$'),
    byte_size     bigint NOT NULL CHECK (byte_size >= 0),
    mime          text NOT NULL,
    object_key    text NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (space_id, content_hash)
);

-- A document keeps its identity across versions: the (source_kind, source_ref) pair,
-- or without a pair the content hash of its first bytes.
CREATE TABLE documents (
    doc_id           uuid PRIMARY KEY,
    space_id         uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    source_kind      text NOT NULL,
    source_ref       text,
    identity_hash    text,
    title            text,
    versioning_mode  text NOT NULL CHECK (versioning_mode IN ('snapshot', 'living')),
    acl              text[] NOT NULL DEFAULT '{}',
    first_seen_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    deleted_at       timestamptz,
    CHECK ((source_ref IS NULL) <> (identity_hash IS NULL))
);
CREATE UNIQUE INDEX documents_pair ON documents (space_id, source_kind, source_ref)
    WHERE source_ref IS NOT NULL;
CREATE UNIQUE INDEX documents_content_identity ON documents (space_id, identity_hash)
    WHERE identity_hash IS NOT NULL;
CREATE INDEX documents_listing ON documents (space_id, first_seen_at DESC, doc_id DESC)
    WHERE deleted_at IS NULL;

-- Versions are append-only byte snapshots of a document.
CREATE TABLE document_versions (
    version_id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    doc_id              uuid NOT NULL REFERENCES documents,
    space_id            uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version_no          integer NOT NULL CHECK (version_no >= 1),
    content_hash        text NOT NULL,
    source_version_ref  text,
    source_modified_at  timestamptz,
    status              text NOT NULL DEFAULT 'ingesting'
        CHECK (status IN ('ingesting', 'converting', 'structuring', 'ready', 'failed', 'deleted')),
    error               text,
    principal_kind      text CHECK (principal_kind IN ('user', 'api_credential', 'service')),
    principal_ref       text,
    ingested_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    deleted_at          timestamptz,
    UNIQUE (doc_id, version_no),
    FOREIGN KEY (space_id, content_hash) REFERENCES content_objects (space_id, content_hash)
);
CREATE INDEX document_versions_doc ON document_versions (doc_id, version_no DESC);

-- The durable work queue: one row per unit of pipeline work.
CREATE TABLE work_units (
    work_id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    space_id           uuid NOT NULL REFERENCES spaces ON DELETE CASCADE,
    version_id         uuid NOT NULL REFERENCES document_versions,
    stage              text NOT NULL,
    unit_key           text NOT NULL DEFAULT '',
    component_version  text NOT NULL,
    status             text NOT NULL DEFAULT 'pending'
        CHECK (status IN ('pending', 'running', 'succeeded', 'failed', 'dead_letter', 'skipped')),
    defer_reason       text CHECK (defer_reason IN ('no_route', 'budget', 'scheduled', 'retry_backoff')),
    attempts           integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts       integer NOT NULL DEFAULT 3 CHECK (max_attempts >= 1),
    not_before         timestamptz NOT NULL DEFAULT clock_timestamp(),
    lease_owner        text,
    lease_expires_at   timestamptz,
    last_error         text,
    error_class        text,
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at        timestamptz,
    UNIQUE (version_id, stage, unit_key, component_version)
);
CREATE INDEX work_units_claimable ON work_units (not_before)
    WHERE status IN ('pending', 'failed') AND defer_reason IS DISTINCT FROM 'no_route';
CREATE INDEX work_units_version ON work_units (version_id, stage);

-- Wake sleeping workers as soon as work is queued; they also poll as a fallback.
CREATE FUNCTION work_units_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('testament_work', NEW.stage);
    RETURN NULL;
END;
$$;
CREATE TRIGGER work_units_notify AFTER INSERT OR UPDATE OF status, not_before ON work_units
    FOR EACH ROW WHEN (NEW.status IN ('pending', 'failed'))
    EXECUTE FUNCTION work_units_notify();
