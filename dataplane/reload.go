package dataplane

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/portcullis-dev/portcullis/policy"
)

// LoadFile reads, validates and applies the policy in path. The version
// label is the document's hash ("sha256:" and 12 hex digits). On any error
// the version in force stays.
func (p *Proxy) LoadFile(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read policy %s: %w", path, err)
	}
	if err := p.loadDocument(path, data); err != nil {
		return err
	}
	p.fileReloads.setApplied(sha256.Sum256(data))
	return nil
}

// loadDocument validates and applies one policy document read from path.
func (p *Proxy) loadDocument(path string, data []byte) error {
	pol, warnings, err := policy.Parse(data)
	if err != nil {
		return fmt.Errorf("policy %s: %w", path, err)
	}
	for _, w := range warnings {
		p.log.Warn("policy warning", "file", path, "path", w.Path, "warning", w.Message)
	}
	return p.SetPolicy(pol, "sha256:"+pol.Hash()[:12])
}

// watchFile keeps the proxy's policy in step with path until ctx ends: the
// file is read every interval, and a changed, valid document swaps in
// atomically. An invalid file is refused and logged; the last good version
// stays (with none, every request is denied).
func (p *Proxy) watchFile(ctx context.Context, path string, interval time.Duration) {
	// Start from the file already applied (LoadFile), so it is not loaded
	// and logged a second time.
	last := p.fileReloads.applied()
	check := func() {
		data, err := os.ReadFile(path)
		if err != nil {
			p.log.Error("cannot read the policy file; keeping the current version", "file", path, "err", err)
			return
		}
		sum := sha256.Sum256(data)
		if sum == last {
			return
		}
		last = sum
		err = p.loadDocument(path, data)
		if err == nil {
			p.fileReloads.setApplied(sum)
		}
		if err != nil {
			p.log.Error("policy file refused; keeping the current version", "file", path, "file_sha256", hex.EncodeToString(sum[:8]), "err", err)
		}
		p.fileReloads.record(err)
	}
	check()
	onEveryTick(ctx, interval, check)
}

// onEveryTick calls f every interval until ctx ends; the proxy's periodic
// work (the policy file, the recheck of open tunnels) runs on it.
func onEveryTick(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}

// reloadStatus counts the changed policy files a proxy has read and keeps
// the last refusal.
type reloadStatus struct {
	mu         sync.Mutex
	count      int
	lastErr    error
	appliedSum [sha256.Size]byte // of the last policy file applied
}

func (s *reloadStatus) setApplied(sum [sha256.Size]byte) {
	s.mu.Lock()
	s.appliedSum = sum
	s.mu.Unlock()
}

func (s *reloadStatus) applied() [sha256.Size]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.appliedSum
}

func (s *reloadStatus) record(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.count++
	s.lastErr = err
}

// FileReloads returns how many changed policy files the watcher has read,
// and why the last one was refused (nil if it was applied).
func (p *Proxy) FileReloads() (int, error) {
	p.fileReloads.mu.Lock()
	defer p.fileReloads.mu.Unlock()
	return p.fileReloads.count, p.fileReloads.lastErr
}
