//go:build integration

package fault

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/k8s-lease/k8s-lease/internal/history"
)

// Five candidates hold the lease until killed: the leader is SIGKILLed or
// SIGTERMed at random and restarted under its identity, so every leader
// change is a kill (a SIGKILLed leader is replaced a lease duration after
// its last renewal, a SIGTERMed one at once). CI needs >= 100 leader
// changes; `make soak` sets FAULT_CHURN_CHANGES=1000. The longest scenario,
// in a file that sorts first: the first parallel scenario to start.
func TestChurnWithKills(t *testing.T) {
	t.Parallel()
	want := envInt(t, "FAULT_CHURN_CHANGES", 100)
	limit := time.Duration(envInt(t, "FAULT_CHURN_MINUTES", 6)) * time.Minute
	s := newScenario(t, quick)
	for i := 0; i < 5; i++ {
		s.start(fmt.Sprintf("churn-%d", i), candOpts{})
	}
	rng := rand.New(rand.NewSource(time.Now().UnixNano()))
	begin := time.Now()
	since := int64(0)
	took := map[string][]time.Duration{} // time to the next leader, by signal
	lastSignal := ""
	for len(took["SIGKILL"])+len(took["SIGTERM"]) < want && time.Since(begin) < limit {
		leader, term := s.awaitLeader(s.timing.lease+s.timing.renew+10*time.Second, since)
		if lastSignal != "" {
			took[lastSignal] = append(took[lastSignal], time.Duration(term.Start-since))
		}
		if n := len(took["SIGKILL"]) + len(took["SIGTERM"]); n > 0 && n%100 == 0 {
			t.Logf("%d leaders killed in %v", n, time.Since(begin).Round(time.Second))
		}
		time.Sleep(time.Duration(50+rng.Intn(200)) * time.Millisecond)
		since = history.Now()
		if rng.Intn(2) == 0 {
			lastSignal = "SIGKILL"
			s.sigkill(leader)
		} else {
			lastSignal = "SIGTERM"
			s.sigterm(leader)
		}
		s.start(leader.id, candOpts{})
	}
	_, term := s.awaitLeader(s.timing.lease+s.timing.renew+10*time.Second, since)
	took[lastSignal] = append(took[lastSignal], time.Duration(term.Start-since))
	s.stopAll()
	r := s.verify()
	t.Logf("churn: %d leader changes in %v; %d SIGKILLs of the leader (next leader after median %v), %d SIGTERMs (median %v); tokens %d..%d",
		r.LeaderChanges(), time.Since(begin).Round(time.Second), len(took["SIGKILL"]), median(took["SIGKILL"]),
		len(took["SIGTERM"]), median(took["SIGTERM"]), r.Terms[0].Token, r.Terms[len(r.Terms)-1].Token)
	if r.LeaderChanges() < want {
		t.Errorf("only %d leader changes within %v, want >= %d", r.LeaderChanges(), limit, want)
	}
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sorted := append([]time.Duration(nil), d...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
	return sorted[len(sorted)/2].Round(time.Millisecond)
}

func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}
