-- The audit log becomes a hash chain (see store.AuditHash): every entry gets
-- its place in one order across replicas (seq), the hash of the entry before
-- it (prev_hash) and its own hash.
--
-- One order across replicas: audit_head is a single row holding the newest
-- seq and hash. Every write transaction, as its last step before commit,
-- locks it (SELECT … FOR UPDATE), appends its entries after it and moves it.
-- A second writer blocks on the row lock until the first commits, then
-- reads the row it committed (READ COMMITTED re-reads a locked row once the
-- lock is released). A row rather than an advisory lock: the lock and the
-- value it protects are one thing, AuditHead is a one-row read, and no lock
-- number can clash with another program's. Taking it last keeps the time it
-- is held short and means a transaction holding it waits for no other lock.
--
-- Rows written before this migration have seq NULL until the store, when it
-- opens, chains them in id order (in Go, with the hash the engines share).
-- That is the one update the append-only trigger lets through: giving an
-- unchained row its seq and hashes, every other column unchanged, once.

-- +goose Up
ALTER TABLE audit_log
    ADD COLUMN seq       BIGINT,
    ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '',
    ADD COLUMN hash      TEXT NOT NULL DEFAULT '',
    ADD CONSTRAINT audit_log_seq_key UNIQUE (seq),
    ADD CONSTRAINT audit_log_seq_check CHECK (seq > 0);

CREATE TABLE audit_head (
    id   INTEGER NOT NULL,
    seq  BIGINT  NOT NULL,
    hash TEXT    NOT NULL,
    CONSTRAINT audit_head_pkey PRIMARY KEY (id),
    CONSTRAINT audit_head_id_check CHECK (id = 1),
    CONSTRAINT audit_head_seq_check CHECK (seq >= 0)
);
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '');

DROP TRIGGER audit_log_append_only ON audit_log;

CREATE TRIGGER audit_log_append_only
    BEFORE DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION portcullis_refuse_change();

CREATE TRIGGER audit_log_chain_once
    BEFORE UPDATE ON audit_log
    FOR EACH ROW
    WHEN (NOT (OLD.seq IS NULL AND NEW.seq IS NOT NULL
        AND (NEW.id, NEW.at, NEW.actor, NEW.action, NEW.sandbox, NEW.target,
             NEW.before_hash, NEW.after_hash, NEW.detail)
            IS NOT DISTINCT FROM
            (OLD.id, OLD.at, OLD.actor, OLD.action, OLD.sandbox, OLD.target,
             OLD.before_hash, OLD.after_hash, OLD.detail)))
    EXECUTE FUNCTION portcullis_refuse_change();

-- +goose Down
DROP TRIGGER audit_log_chain_once ON audit_log;
DROP TRIGGER audit_log_append_only ON audit_log;
CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION portcullis_refuse_change();
DROP TABLE audit_head;
ALTER TABLE audit_log
    DROP CONSTRAINT audit_log_seq_check,
    DROP CONSTRAINT audit_log_seq_key,
    DROP COLUMN hash,
    DROP COLUMN prev_hash,
    DROP COLUMN seq;
