package main

import (
	"testing"
	"time"
)

// TestBackAfter: after a kill, a proxy of the killed replica is back once
// a new stream holds its sandbox's version current at the kill; one of
// another replica once it holds that version; one that never reconnects
// is not back, and the fleet's time is then unknown (-1).
func TestBackAfter(t *testing.T) {
	t0 := time.Unix(1000, 0)
	k := kill{Replica: 0, At: t0.Add(30 * time.Second), Ready: t0.Add(31 * time.Second)}
	at := func(d time.Duration) int64 { return k.At.Add(d).UnixNano() }
	h := &history{versions: map[string]map[uint32]versionInfo{
		"sb": {1: {Created: t0}, 2: {Created: k.At.Add(-time.Second)}, 3: {Created: k.At.Add(time.Second)}},
	}}
	moved := proxyLog{ID: "p0", Sandbox: "sb", Events: []event{
		{K: evUp, T: at(-20 * time.Second), R: 0, V: 1},
		{K: evApply, T: at(-900 * time.Millisecond), R: 0, V: 2},
		// The old stream's last ACK, after the kill: not a new stream.
		{K: evApply, T: at(2 * time.Millisecond), R: 0, V: 2},
		{K: evDown, T: at(5 * time.Millisecond), R: 0},
		{K: evUp, T: at(300 * time.Millisecond), R: 1, V: 2},
	}}
	stayed := proxyLog{ID: "p1", Sandbox: "sb", Events: []event{
		{K: evUp, T: at(-20 * time.Second), R: 1, V: 1},
		{K: evApply, T: at(100 * time.Millisecond), R: 1, V: 2},
	}}
	row := backAfter(k, t0, []proxyLog{moved, stayed}, h, 0)
	if row.OnReplica != 1 || row.NotBack != 0 || row.AllBackMs != 300 || row.RestartMs != 1000 || row.AtS != 30 {
		t.Fatalf("backAfter = %+v, want 1 on the replica, all back in 300 ms, restart 1000 ms, at 30 s", row)
	}
	lost := proxyLog{ID: "p2", Sandbox: "sb", Events: []event{
		{K: evUp, T: at(-20 * time.Second), R: 0, V: 2},
		{K: evDown, T: at(5 * time.Millisecond), R: 0},
	}}
	row = backAfter(k, t0, []proxyLog{moved, stayed, lost}, h, 0)
	if row.OnReplica != 2 || row.NotBack != 1 || row.AllBackMs != -1 {
		t.Fatalf("backAfter with a proxy that never came back = %+v, want 2 on the replica, 1 not back, -1", row)
	}
}

// TestAnalyze: acknowledged operations are checked against the history
// (one missing is LOST), pushes count only on streams connected before
// the commit, and a timeline that goes back a version is a regression.
func TestAnalyze(t *testing.T) {
	t0 := time.Unix(1000, 0)
	cfg := config{replicas: 2, duration: time.Minute}
	h := &history{
		versions: map[string]map[uint32]versionInfo{
			"sb": {1: {Hash: "h1", Source: "create", Created: t0.Add(-time.Minute)}, 2: {Hash: "h2", Source: "set", Created: t0.Add(time.Second)}, 3: {Hash: "h3", Source: "proposal", Proposal: "7", Created: t0.Add(2 * time.Second)}},
		},
		proposals: map[uint64]proposalInfo{7: {Sandbox: "sb", Status: "applied", Applied: 3}},
	}
	end := t0.Add(3 * time.Second)
	ops := []opResult{
		{Kind: opSet, Sandbox: "sb", End: end, Version: 2, Hash: "h2"},
		{Kind: opPropose, Sandbox: "sb", End: end, Proposal: 7},
		{Kind: opApprove, Sandbox: "sb", End: end, Proposal: 7, Version: 3, Hash: "h3"},
		{Kind: opSet, Sandbox: "sb", End: end, Version: 4, Hash: "h4"}, // answered, not stored
		{Kind: opSet, Sandbox: "sb", End: end, Err: "Unavailable: gone"},
	}
	c2 := t0.Add(time.Second).UnixNano()
	proxies := []proxyLog{
		{ID: "p0", Sandbox: "sb", Events: []event{
			{K: evUp, T: t0.UnixNano(), R: 0, V: 1},
			{K: evApply, T: c2 + int64(40*time.Millisecond), R: 0, V: 2, C: c2, Live: true},
		}},
		{ID: "p1", Sandbox: "sb", Events: []event{
			{K: evUp, T: t0.UnixNano(), R: 1, V: 2},
			{K: evOlder, T: t0.UnixNano(), R: 1, V: 1, Held: 2},
			{K: evDown, T: c2, R: 1},
			{K: evUp, T: c2 + int64(time.Second), R: 0, V: 1}, // a regression
		}},
	}
	res := analyze(cfg, t0, nil, ops, proxies, h)
	if res.Acked != 4 || res.Found != 3 || res.Lost != 1 || res.Failed != 1 {
		t.Errorf("acked %d found %d lost %d failed %d, want 4, 3, 1, 1 (%v)", res.Acked, res.Found, res.Lost, res.Failed, res.LostDetail)
	}
	m := res.Minutes[0]
	if m.SetAcks != 1 || m.AckP99Ms != 40 || m.SetVersions != 1 || m.Reconnects != 1 || m.ReconnectedProxies != 1 {
		t.Errorf("minute = %+v, want one set ACK at 40 ms and one reconnect", m)
	}
	if m.AnswerAckP99Ms != -1960 { // the set answered at 3 s, ACKed at 1.04 s
		t.Errorf("from answer p99 = %v ms, want -1960", m.AnswerAckP99Ms)
	}
	if res.Regressions != 1 || res.OlderOffered != 1 || res.FinalByReplica[0] != 2 {
		t.Errorf("regressions %d, older offered %d, by replica %v; want 1, 1, [2 0]", res.Regressions, res.OlderOffered, res.FinalByReplica)
	}
}
