package main

import (
	"testing"
	"time"
)

func TestTerms(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	events := []leaseEvent{
		{holder: "r0", token: 1, renew: at(0), incarnation: "a"},
		{holder: "r0", token: 1, renew: at(1000), incarnation: "a"},
		{holder: "r2", token: 1, renew: at(1500), handOffTo: "r2"}, // r0 hands off
		{holder: "r2", token: 2, renew: at(1510), incarnation: "b"},
		{holder: "r2", token: 2, renew: at(2000), incarnation: "b"},
		{holder: "", token: 2, renew: at(2100)},   // r2 releases
		{holder: "r2", token: 3, renew: at(2400)}, // the same identity again, a new term (client-go)
		{holder: "r1", token: 4, renew: at(3000)}, // taken over after expiry
	}
	ts, moves := terms(events)
	if len(ts) != 4 || len(moves) != 3 {
		t.Fatalf("terms %d, moves %d; want 4, 3", len(ts), len(moves))
	}
	want := []time.Duration{10 * time.Millisecond, 300 * time.Millisecond, 600 * time.Millisecond}
	for i, m := range moves {
		if m.leaderless != want[i] {
			t.Errorf("move %d (%s->%s): leaderless %v, want %v", i, m.from.holder, m.to.holder, m.leaderless, want[i])
		}
	}
	if moves[0].to.first != 3 || moves[2].to.first != 7 {
		t.Errorf("first records %d, %d; want 3, 7", moves[0].to.first, moves[2].to.first)
	}
	if !led(events) || led(events[:6]) || led(events[:3]) {
		t.Error("led: wrong")
	}
}
