package gatewayclient

import (
	"testing"
	"time"
)

// The estimate pairs answers with heartbeats in order and never says the
// gateway is less far ahead than it is.
func TestGatewayClockPairsInOrder(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var c gatewayClock
	if got := c.aheadOf(); got != 0 {
		t.Fatalf("before any answer: %v", got)
	}
	// An answer with no heartbeat outstanding tells nothing.
	c.restart()
	c.answered(t0.Add(time.Hour))
	if got := c.aheadOf(); got != 0 {
		t.Fatalf("an unpaired answer moved the estimate to %v", got)
	}
	// Two heartbeats out, the gateway 5 minutes ahead, answers taking
	// 10 ms: each answer pairs with the oldest heartbeat.
	const ahead = 5 * time.Minute
	c.sent(t0)
	c.sent(t0.Add(10 * time.Second))
	if got, news := c.answered(t0.Add(ahead + 10*time.Millisecond)); got != ahead+10*time.Millisecond || !news {
		t.Fatalf("first answer: %v (news %v)", got, news)
	}
	if got, news := c.answered(t0.Add(10*time.Second + ahead + 20*time.Millisecond)); got != ahead+20*time.Millisecond || news {
		t.Fatalf("second answer: %v (news %v)", got, news)
	}
	// A third answer with nothing outstanding changes nothing.
	c.answered(t0.Add(time.Hour))
	if got := c.aheadOf(); got != ahead+20*time.Millisecond {
		t.Fatalf("after an unpaired answer: %v", got)
	}
	// A new stream forgets the old one's heartbeats, not the estimate.
	c.sent(t0.Add(20 * time.Second))
	c.restart()
	if got := c.aheadOf(); got != ahead+20*time.Millisecond {
		t.Fatalf("after a new stream: %v", got)
	}
	c.answered(t0.Add(time.Hour))
	if got := c.aheadOf(); got != ahead+20*time.Millisecond {
		t.Fatalf("an answer paired with the old stream's heartbeat: %v", got)
	}
	// The gateway behind: no correction.
	c.sent(t0.Add(30 * time.Second))
	c.answered(t0.Add(30*time.Second - ahead))
	if got := c.aheadOf(); got != 0 {
		t.Fatalf("gateway behind: %v", got)
	}
	// Too many unanswered: the pairing is lost for the stream.
	c.restart()
	for i := range maxPending + 1 {
		c.sent(t0.Add(time.Duration(i) * time.Second))
	}
	c.answered(t0.Add(time.Hour))
	if got := c.aheadOf(); got != 0 {
		t.Fatalf("after losing the pairing: %v", got)
	}
}
