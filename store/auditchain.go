package store

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"slices"
)

// The audit log is a hash chain. Entries are numbered 1, 2, … (Seq) in one
// order shared by every gateway replica (each engine appends under a lock
// on the chain head, in the transaction of the change). Each entry carries
// the hash of the one before it (PrevHash, "" for the first) and its own
// Hash, which covers its content and PrevHash. So a row edited, removed or
// inserted anywhere but at the end breaks the chain from that row on; a
// removed tail is caught by comparing the head (AuditHead) with an outside
// copy — the gateway logs it at every change.

// AuditHashDomain separates audit entry hashes from every other SHA-256 the
// system computes (policy hashes, token hashes): it is the first field
// hashed, so no other kind of value can collide with an entry.
const AuditHashDomain = "portcullis audit entry v1"

// AuditHash returns the hex SHA-256 of e as the chain defines it. ID and
// Hash are not covered; everything else is, in this order:
//
//	domain, seq, time, actor, action, sandbox, target, before_hash,
//	after_hash, detail, prev_hash
//
// Integers (seq; time as nanoseconds since the Unix epoch, UTC) are 8
// bytes big-endian, two's complement. A string is its byte length (8 bytes
// big-endian) followed by its bytes. Detail is its number of keys (8
// bytes) followed by key and value of each, keys sorted bytewise; a nil
// and an empty map hash alike. The length prefixes make the encoding
// injective: no two different entries give the same bytes.
func AuditHash(e AuditEntry) string {
	h := sha256.New()
	putString(h, AuditHashDomain)
	putInt(h, e.Seq)
	putInt(h, e.Time.UnixNano())
	for _, s := range []string{e.Actor, e.Action, e.Sandbox, e.Target, e.BeforeHash, e.AfterHash} {
		putString(h, s)
	}
	keys := make([]string, 0, len(e.Detail))
	for k := range e.Detail {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	putInt(h, int64(len(keys)))
	for _, k := range keys {
		putString(h, k)
		putString(h, e.Detail[k])
	}
	putString(h, e.PrevHash)
	return hex.EncodeToString(h.Sum(nil))
}

func putInt(h hash.Hash, n int64) {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(n))
	h.Write(b[:])
}

func putString(h hash.Hash, s string) {
	putInt(h, int64(len(s)))
	h.Write([]byte(s))
}

// Problems VerifyAuditChain reports.
const (
	// ChainContentChanged: the entry's fields no longer give its hash (the
	// row was edited).
	ChainContentChanged = "content changed: the entry's hash does not match its fields"
	// ChainPrevMismatch: the entry's prev_hash is not the hash of the entry
	// before it (that one was replaced, re-hashed, or this one moved).
	ChainPrevMismatch = "prev_hash mismatch: the entry does not follow the one before it"
	// ChainGap: the entry with this seq is missing (removed).
	ChainGap = "gap in seq: the entry is missing"
	// ChainHeadMismatch: the chain head the store records disagrees with
	// the last entry (entries at the end were removed or replaced).
	ChainHeadMismatch = "head mismatch: the recorded head is not the last entry"
)

// ChainError is the first place an audit chain does not hold.
type ChainError struct {
	// Seq is the first bad entry (for a gap, the missing one).
	Seq     int64
	Problem string
}

func (e *ChainError) Error() string {
	return fmt.Sprintf("audit chain broken at seq %d: %s", e.Seq, e.Problem)
}

// VerifyAuditChain checks entries, oldest first, as the continuation of a
// chain whose last checked entry had seq after and hash prev (0 and "" to
// start from the beginning). It returns the seq and hash of its last entry
// (after and prev when entries is empty), or a *ChainError for the first
// entry that breaks the chain.
func VerifyAuditChain(after int64, prev string, entries []AuditEntry) (seq int64, head string, err error) {
	for _, e := range entries {
		switch {
		case e.Seq != after+1:
			return after, prev, &ChainError{Seq: after + 1, Problem: ChainGap}
		case e.PrevHash != prev:
			return after, prev, &ChainError{Seq: e.Seq, Problem: ChainPrevMismatch}
		case AuditHash(e) != e.Hash:
			return after, prev, &ChainError{Seq: e.Seq, Problem: ChainContentChanged}
		}
		after, prev = e.Seq, e.Hash
	}
	return after, prev, nil
}

// AuditChainReader is the part of Store VerifyAuditLog reads.
type AuditChainReader interface {
	AuditChain(ctx context.Context, afterSeq int64, limit int) ([]AuditEntry, error)
	AuditHead(ctx context.Context) (seq int64, hash string, err error)
}

// AuditVerification is the result of VerifyAuditLog.
type AuditVerification struct {
	// Entries is how many entries were checked and found good.
	Entries int64
	// HeadHash is the hash of the newest entry checked ("" for an empty
	// log).
	HeadHash string
	// Break is the first problem, nil when the chain holds.
	Break *ChainError
}

// VerifyAuditLog checks the audit chain from its first entry up to the head
// the store records when it starts (entries appended meanwhile are left for
// the next run), reading pageSize entries at a time. A chain problem is
// reported in the result; the error is for failed reads only.
func VerifyAuditLog(ctx context.Context, r AuditChainReader, pageSize int) (AuditVerification, error) {
	if pageSize <= 0 {
		pageSize = 1000
	}
	headSeq, headHash, err := r.AuditHead(ctx)
	if err != nil {
		return AuditVerification{}, fmt.Errorf("verify audit: %w", err)
	}
	var (
		seq  int64
		hash string
		last AuditEntry
	)
	for seq < headSeq {
		page, err := r.AuditChain(ctx, seq, min(pageSize, int(headSeq-seq)))
		if err != nil {
			return AuditVerification{}, fmt.Errorf("verify audit: %w", err)
		}
		var cerr error
		seq, hash, cerr = VerifyAuditChain(seq, hash, page)
		if cerr != nil {
			return AuditVerification{Entries: seq, HeadHash: hash, Break: cerr.(*ChainError)}, nil
		}
		if len(page) == 0 { // the chain ends before the head
			return AuditVerification{Entries: seq, HeadHash: hash, Break: &ChainError{Seq: seq + 1, Problem: ChainGap}}, nil
		}
		last = page[len(page)-1]
	}
	if seq > 0 && hash != headHash {
		// The last entry is consistent with the ones before it but not
		// the one the store recorded: it is the first one not to match.
		return AuditVerification{Entries: seq - 1, HeadHash: last.PrevHash, Break: &ChainError{Seq: seq, Problem: ChainHeadMismatch}}, nil
	}
	return AuditVerification{Entries: seq, HeadHash: hash}, nil
}
