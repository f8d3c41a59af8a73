package blackhole

import (
	"testing"
	"time"
)

func TestSwitch(t *testing.T) {
	var s Switch
	if s.Hole() != nil || !s.Pass(nil) || s.Heal() {
		t.Fatal("the zero Switch is not off")
	}
	s.On()
	passed := make(chan bool)
	go func() { passed <- s.Pass(nil) }()
	select {
	case <-passed:
		t.Fatal("passed a black hole")
	case <-time.After(50 * time.Millisecond):
	}
	if !s.Heal() {
		t.Fatal("Heal did not see the black hole")
	}
	if !<-passed {
		t.Fatal("not released by Heal")
	}
	s.On()
	abort := make(chan struct{})
	close(abort)
	if s.Pass(abort) {
		t.Fatal("passed a black hole despite the abort")
	}
}
