-- The audit log becomes a hash chain (see store.AuditHash): every entry gets
-- its place in one order (seq), the hash of the entry before it (prev_hash)
-- and its own hash. audit_head holds the newest seq and hash; an append
-- reads it, writes the entry and moves it in the same transaction (SQLite
-- has a single writer, so appends cannot interleave).
--
-- Rows written before this migration have seq NULL until the store, when it
-- opens, chains them in id order (in Go: SQLite has no SHA-256). That is the
-- one update the append-only trigger lets through: giving an unchained row
-- its seq and hashes, every other column unchanged, once.

-- +goose Up
ALTER TABLE audit_log ADD COLUMN seq INTEGER CHECK (seq > 0);
ALTER TABLE audit_log ADD COLUMN prev_hash TEXT NOT NULL DEFAULT '';
ALTER TABLE audit_log ADD COLUMN hash TEXT NOT NULL DEFAULT '';
CREATE UNIQUE INDEX audit_log_seq_idx ON audit_log (seq);

CREATE TABLE audit_head (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    seq  INTEGER NOT NULL CHECK (seq >= 0),
    hash TEXT    NOT NULL
) STRICT;
INSERT INTO audit_head (id, seq, hash) VALUES (1, 0, '');

DROP TRIGGER audit_log_no_update;
-- +goose StatementBegin
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
WHEN NOT (OLD.seq IS NULL AND NEW.seq IS NOT NULL
    AND NEW.id IS OLD.id AND NEW.at IS OLD.at AND NEW.actor IS OLD.actor
    AND NEW.action IS OLD.action AND NEW.sandbox IS OLD.sandbox AND NEW.target IS OLD.target
    AND NEW.before_hash IS OLD.before_hash AND NEW.after_hash IS OLD.after_hash
    AND NEW.detail IS OLD.detail)
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER audit_log_no_update;
-- +goose StatementBegin
CREATE TRIGGER audit_log_no_update BEFORE UPDATE ON audit_log
BEGIN
    SELECT RAISE(ABORT, 'audit_log is append-only');
END;
-- +goose StatementEnd
DROP TABLE audit_head;
DROP INDEX audit_log_seq_idx;
ALTER TABLE audit_log DROP COLUMN hash;
ALTER TABLE audit_log DROP COLUMN prev_hash;
ALTER TABLE audit_log DROP COLUMN seq;
