package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// The benchmarks page (docs/benchmarks.md): for each section of the bench,
// how to read its table (the text below) and the table of the latest run
// that measured it, under one line naming that run. A run of some sections
// (-only) replaces their tables and keeps the others as the page has them:
// each table sits between two markers (pageMarkers), and the rest of the
// page is written from this file every time.

const pageHeader = "<!-- written by make bench (cmd/lease-bench/page.go); edit that, not this file -->"

// pageSection is the static part of a section's part of the page.
type pageSection struct {
	name  string // as -only names it (sectionNames)
	title string
	read  string // how to read the table (markdown)
	// writtenBy: the command that writes this section's table if not
	// make bench (whose runs then keep it as it is).
	writtenBy string
}

const pageIntro = "# Benchmarks\n\n" +
	"`make bench` measures this library and plain client-go leader election (`LeaderElector`) " +
	"side by side against a real API server: envtest's kube-apiserver and etcd, started by " +
	"`cmd/envtest-server`, on loopback. The two implementations alternate, each candidate has its " +
	"own client connection, and client-side rate limiting is off for both. A whole run takes " +
	"about 31 minutes (the `ha` section alone took 7.6); `make bench BENCH_FLAGS=-only=SECTION,...` runs the sections named (each " +
	"heading below gives its name) and replaces only their tables here. `BENCH_FLAGS=-quick` is a " +
	"smoke run (few samples, short windows), not a measurement: it writes " +
	"`build/benchmarks-quick.md`, not this page. `build/bench.json` holds every sample of the last run.\n\n" +
	"How to read a table: one row per measurement, the two implementations side by side. A cell is " +
	"`min / p50 / p90 / max (n)` over n samples (nearest-rank percentiles), or the one value when " +
	"there is one sample; `–`: not measured for that implementation (client-go has no such call " +
	"or feature). Timings are written as lease duration / renew deadline / retry period " +
	"(`5/4/1 s`). Each table comes from one run, named in the line above it: its date, the machine, " +
	"the versions and the command. Tables of different runs may come from different loads of the " +
	"machine: compare the two columns of one table, not figures of two tables.\n"

var pageSections = []pageSection{
	{name: "elected", title: "Free lease to elected", read: "" +
		"A candidate starts on a Lease that does not exist yet, at 5/4/1 s; the sample runs from its " +
		"start (ours: a `lease.Manager` on a new client, `RunElection`; client-go: a new " +
		"`LeaderElector`'s `Run`) until it is elected (our `WaitElected` returns, client-go calls " +
		"`OnStartedLeading`). n=15 for each implementation."},
	{name: "handoff", title: "Graceful hand-off", read: "" +
		"A leader and 1 or 5 standbys on one Lease, at 5/4/1 s and at 15/10/2 s; the standbys have " +
		"seen the held lease. The leader stops and releases the Lease (ours: `Shutdown`; client-go: " +
		"cancel with `ReleaseOnCancel`); the sample runs from the stop until the first standby " +
		"leads. A standby of ours watches the Lease and takes a released one at once; client-go's " +
		"find it at their next attempt, every retry period with jitter. n=15 for each implementation."},
	{name: "handoff-to", title: "Hand-off to a chosen replica", read: "" +
		"A leader and two campaigning standbys at 5/4/1 s; the leader calls " +
		"`Manager.HandOff(ns, name, target, 5 s)` (the C API's `K8sLeaseHandOff`) naming one of them. " +
		"The first row runs from the call until the target's `WaitElected` returns, the second until " +
		"`HandOff` returns (the old leader has seen the target lead); n=30. Ours only: client-go has " +
		"no hand-off to a chosen candidate. An admin watch on the Lease checks every record written " +
		"from the call to the target's own first record: none may name another holder than the " +
		"target (the old leader's renewals sent before its hand-off record excepted). The third row " +
		"counts such records over all hand-offs; the run fails unless it is 0. A hand-off is three " +
		"API round trips in a row: a read of the target's candidate record (a target that does not " +
		"campaign is refused), the hand-off record, the target's acquisition."},
	{name: "routing", title: "Leader-only routing", read: "" +
		"Ours only: plain client-go has no leader-only routing (`K8sLeasePublishEndpoint`, see " +
		"docs/operations.md). Three replicas, each a `lease.Manager` on its own connection, campaign at " +
		"5/4/1 s on three Leases at once. On two of them every candidacy calls `Manager.PublishEndpoint` " +
		"(the C API's `K8sLeasePublishEndpoint`) with its replica's address (10.244.0.1 to .3, port " +
		"8080) for a selector-less Service with one unnamed port, created through the admin client; on " +
		"the third, none. n=30 rounds; in each, the leader of the first Lease calls `Manager.HandOff` to " +
		"the standby campaigning longest, the leader of the Lease without an endpoint does the same (the " +
		"two in alternating order), and the leader of the third is cancelled (`CancelElection`: it " +
		"withdraws its endpoint and releases; a standby takes the Lease). The old leader campaigns again " +
		"at once; the next move waits until `Manager.Candidates` lists it, then 300 ms. Admin watches on " +
		"the Leases and on each Service's EndpointSlices (label `kubernetes.io/service-name`), on one " +
		"connection, give the first four rows: from the new leader's `WaitElected` returning (a goroutine " +
		"blocked in it), or from the Lease watch delivering its acquisition, to the slice watch " +
		"delivering the first state that lists the new leader's address alone. Negative: listed before " +
		"`WaitElected` returned, as designed (the new leader writes its endpoint right after it acquires " +
		"the Lease, and `WaitElected` returns after that write); the second measure is about the time of " +
		"that write. Then the time from the `HandOff` call until the target's `WaitElected` returns, with " +
		"and without an endpoint, and their difference; beside it a single Lease write: every renewal (a " +
		"PATCH) of the three leaders, timed at their transport from sending it to the response's " +
		"headers, and the difference counted in such writes (the target: at most 1). The EndpointSlice " +
		"requests of the replicas from the `HandOff` call until the target's `WaitElected` returns show " +
		"where the difference goes: the old leader's withdrawal (a read and a write) before its hand-off " +
		"record, the new leader's publication (a read and a write) after its acquisition. Last, a check: " +
		"after each new leader's `WaitElected` returned, a list of the slices at once and every state " +
		"the watch delivers until the next move on that Lease must list no other address than the new " +
		"leader's; the row counts those that do over all moves, and the run fails unless it is 0."},
	{name: "failover", title: "Crash fail-over", read: "" +
		"A leader and one standby; at a random point of the renew cycle the leader's connection is " +
		"cut: it stops renewing and releases nothing, as a frozen or partitioned process does. The " +
		"standby may take the lease once it has expired, at the leader's last `renewTime` plus the " +
		"lease duration; the row is the overshoot past that moment until the standby leads (both " +
		"clocks are this one machine's). n=8 at 5/4/1 s and n=4 at 15/10/2 s for each implementation."},
	{name: "ha", title: "On an HA control plane", read: "" +
		"The graceful hand-off and crash fail-over rows above (5/4/1 s, one standby), measured on two " +
		"beds in one run: the bed of the other sections (one etcd, one kube-apiserver) and an HA bed " +
		"of its own (`envtest-server -etcd-members 3 -apiservers 2`: three etcd members as one " +
		"cluster, two kube-apiservers on it, each with its own watch cache, behind our TCP load " +
		"balancer, round-robin per connection), on this one machine. The beds and the two " +
		"implementations alternate, n=15 hand-offs and n=8 fail-overs for each implementation on each " +
		"bed. On the HA bed a write goes through an API server to an etcd follower or leader, and " +
		"a standby's watch may be served by the other API server than the leader's writes: what that " +
		"costs is the difference between the rows of one implementation. What faults of such a " +
		"control plane cost (an etcd leader killed, an API server frozen, a stale watch cache, lost " +
		"quorum) is measured by the fault suite: see docs/testing.md and docs/guarantees.md."},
	{name: "member-faults-5s", title: "One control-plane member's faults, ours and client-go, 5/4/1 s", writtenBy: "make ha-rivals", read: "" +
		"Written by `make ha-rivals` (`TestHARivalsSingleMemberFaults` in tests/fault, every member's " +
		"faults; `make test` runs both API servers frozen, API server 1 killed, the rolling restart and " +
		"the etcd leader frozen, beside the other beds, and requires clean histories), not by `make bench`. " +
		"On the HA bed (three etcd members, two API servers behind the load balancer, round-robin per " +
		"connection), three of ours campaign on one Lease and three plain client-go electors " +
		"(`tests/fault/clientgocandidate`: `LeaderElector` on a `LeaseLock`, configured as " +
		"kube-controller-manager's) on another, all through the load balancer as the ServiceAccount of " +
		"`deploy/rbac.yaml`. Nobody is killed: the control plane's members suffer one fault at a time, " +
		"the same for both. Every API server in turn frozen (SIGSTOP) for the renew deadline + 2 s, then " +
		"killed (SIGKILL) and started again; every API server restarted in turn gracefully (SIGTERM: it " +
		"drains and sends GOAWAY, as an upgrade does); the etcd leader and a follower frozen as long, " +
		"then each killed and started again. After each fault, a renew deadline and a retry period, then " +
		"a leader on both Leases. Per fault and implementation: the terms that ended lost in that window " +
		"(a client-go elector that lost exits, as kube-controller-manager does, and is started again), " +
		"the time the Lease had no leader, and the interval between successive renewals of one term " +
		"(the Lease's `renewTime`, read through both API servers every 100 ms: a renewal both reads " +
		"missed lengthens an interval; a term that was lost has no interval past its last renewal)."},
	{name: "member-faults-15s", title: "One control-plane member's faults, ours and client-go, 15/10/2 s", writtenBy: "make ha-rivals", read: "" +
		"The faults of the section above, at 15/10/2 s, from the same `make ha-rivals` run."},
	{name: "noisy-tenant", title: "A noisy tenant, with and without the FlowSchema", writtenBy: "make ha-rivals", read: "" +
		"Written by `make ha-rivals` (`TestHARivalsNoisyTenant` in tests/fault; `make test` runs the " +
		"round with the FlowSchema and requires the level overloaded and clean histories), not by `make bench`. Three of ours " +
		"and three client-go electors, each on its Lease, straight at API server 0 as the ServiceAccount of " +
		"`deploy/rbac.yaml`, at 5/4/1 s. Another ServiceAccount floods API server 0 with 400 requests " +
		"at a time, each a list that holds its seat for seconds at almost no CPU (a resourceVersion ahead " +
		"of etcd's, which the watch cache waits for), until its priority level queues and answers 429. " +
		"The bed's API servers have a tenth of kube-apiserver's default seats (40 + 20): APF divides " +
		"them among the levels in the default proportions, so the flood a 2-core machine sends fills " +
		"the level of ServiceAccounts (`workload-low`) as a tenant's expensive lists would fill it on a " +
		"larger one, and the `leader-election` level keeps its 3 seats, which it lends to nobody. First " +
		"without `deploy/flowschema.yaml` (the candidates' requests wait in `workload-low` with the " +
		"flood's), then with it (they go to `leader-election`; it matches the ServiceAccount, so the " +
		"client-go electors, on the same account, are protected too). Columns as in the sections above."},
	{name: "soak-ha", title: "Faults of an HA control plane", writtenBy: "make soak-ha", read: "" +
		"Written by `make soak-ha` (`TestHASoak` in tests/fault, `SOAK` minutes, 60 by default), not by " +
		"`make bench`. On the HA bed, five candidate processes at 4/3/0.5 s compete for one Lease: three " +
		"of ours (`tests/cpp/lease_candidate.cpp` on the shared library; two through the load balancer, " +
		"one straight at API server 0) and two plain client-go ones (`tests/fault/clientgocandidate`, " +
		"`LeaderElector` on a `LeaseLock`; one through the load balancer, one straight at API server 1), " +
		"all as the ServiceAccount of `deploy/rbac.yaml`, with `deploy/flowschema.yaml` applied, on API " +
		"servers with a tenth of the default seats (see the section above). " +
		"A nemesis drawn from a printed seed injects one fault at a time, then waits 0.5 to 3 s: a " +
		"candidate (the leader half the time) SIGKILLed or SIGTERMed and restarted, or SIGSTOPped " +
		"briefly or, ours only, past its lease; an etcd member or an API server frozen or killed for 1 " +
		"to 8 s, then thawed or started again; every API server restarted in turn gracefully (SIGTERM); " +
		"one API server flooded for 5 to 15 s by a noisy tenant (the flood of the section above); or " +
		"nothing. The history checker judges the whole run " +
		"(two leaders at once, tokens that do not rise, `IsLeader` after a step-down): the table is " +
		"written only when it found nothing. A leaderless interval runs from the end of one term (its " +
		"loss, release or kill as logged) to the start of the next, and is counted against the last " +
		"fault begun before that end, if it ended at most a lease duration plus a renew deadline " +
		"earlier (else `none`). A spurious loss is a term that ended lost while its own process was " +
		"neither killed, stopped past its lease, nor terminated: a leadership change the control " +
		"plane caused; a loss of a candidate that goes straight at one API server (no load balancer) " +
		"while a fault made that API server unreachable (frozen, killed, restarted, flooded) is counted " +
		"apart (\"lost straight at the faulted API server\"): nothing can keep such a term, and a replica " +
		"reaches the API servers through a Service. When a fault freezes or kills the member that leads " +
		"etcd, the soak asks the other members every 20 ms whether one leads, and the table shows how " +
		"long etcd was without a leader (to the first answer that named one; p50 / max and how many such " +
		"faults). A term that ended before the last instant at which etcd was known to have no leader " +
		"(every member still running answered, and none led) is counted apart too (\"lost while etcd had " +
		"no leader\"): without a leader etcd commits no write, so no renewal could have kept it, whichever " +
		"library sent it; a term ends at its deadline or after it, so its deadline fell in the stall."},
	{name: "rolling", title: "Rolling update", read: "" +
		"Three replicas r0, r1, r2 (r0 leads first) at 5/4/1 s, updated as a StatefulSet does, from " +
		"the highest ordinal down: stop the replica gracefully and wait for it to end (ours: " +
		"`CancelElection`, then `Shutdown`; client-go: cancel, `ReleaseOnCancel`), start its next " +
		"version with the same identity on a new connection, wait until it campaigns (ours: " +
		"`Manager.Candidates` lists it; client-go: 200 ms), then the next replica. Three updates in a " +
		"row (v1 to v4), three runs: n=9 updates. Ours without a policy (`Version` set), ours with " +
		"the newest-version policy (`Priority` = −ordinal, `PolicyHandOffOnCancel|PolicyYieldToNewer`), " +
		"and client-go. An admin watch on the Lease counts the moves: a move is a new term (a record " +
		"with a new holder or a new `leaseTransitions`; hand-off records are not counted). The " +
		"leaderless time of a move runs from the `renewTime` of the old holder's last record (its " +
		"release or hand-off record, or its last renewal) to the `renewTime` of the new holder's " +
		"first record; both are written by this one process's clock just before each request is " +
		"sent, so the measure is the same for both implementations. With the newest-version policy " +
		"a stopped leader hands the lease to the best remaining candidate, which yields to a newer " +
		"version once it campaigns: two moves in an update that stops the leader. client-go's row " +
		"is one move per update when the restarted leader takes its own released lease back before " +
		"the others' next retry: an artefact of a restart that takes no time (a new pod takes " +
		"seconds to start)."},
	{name: "steady", title: "Steady-state requests", read: "" +
		"A leader and five standbys at 15/10/2 s, past start-up; each candidate's requests, counted " +
		"at its HTTP transport over 4 minutes (two of a standby's watches), per second. The leader " +
		"renews once a retry period; a standby of ours keeps a watch open on the Lease and sends a " +
		"request when the watch ends, client-go's reads the Lease every retry period with jitter."},
	{name: "abi", title: "C ABI calls", read: "" +
		"`tests/bench/abi_bench.c`, a C program on the shared library, times calls as a C host pays " +
		"them: the median over 21 batches of the time per call. `IsLeader` and `GetHolder` on the " +
		"lease of an election this process runs (as leader) answer from memory. The first `GetHolder` " +
		"on another lease starts following it (a list, then a watch): one call on each of 21 new " +
		"leases. Later calls on a lease asked about before, with no election on it, answer from " +
		"memory too. Ours only: client-go has no C API."},
	{name: "user", title: "Our first user's call pattern", read: "" +
		"Three replica processes of `tests/cpp/lease_candidate.cpp --pattern poll` on the shared " +
		"library, as our first user's master calls it: poll `GetHolder` every 200 ms and campaign " +
		"only when it reports no holder (`RunElection` at 5/3/1 s, `WaitElected` 10 s, " +
		"`CancelElection` on a timeout, `WaitLost` as leader). The requests row is what the API " +
		"server counted (`apiserver_request_total`, resource leases) over 60 s with one leader and " +
		"two standbys. Then the leader is stopped 8 times with SIGKILL and 15 times with SIGTERM, " +
		"each time restarted as kubelet would; a row runs from the signal until the next leader's " +
		"term begins (the replicas' shared history log, checked for two leaders at once: the run " +
		"fails if there are). A SIGKILLed leader releases nothing, so the next one waits for the " +
		"lease to expire; counted from the kill, which comes up to a retry period after the last " +
		"renewal, that can be less than a lease duration. Ours only."},
	{name: "scale", title: "Cost: memory, CPU, requests at scale; library size and load time", read: "" +
		"N elections (1, 100, 1000) as leader at 15/10/2 s in a child process that holds one " +
		"implementation only, as its users run it: ours is `tests/bench/scale_child.c`, a C program on " +
		"the shared library (RSS from `/proc`, CPU from `getrusage`, requests and goroutines from " +
		"`K8sLeaseMetrics`); client-go's is `cmd/lease-bench/clientgoscale`, a Go program that links " +
		"client-go's leader election and nothing of ours. Each waits until all N lead, 30 s more for " +
		"the one-time writes of new leaderships (an Event and a candidate record each) to settle, then " +
		"measures for 60 s. RSS and CPU are read at the end of the window, before the metrics scrape " +
		"that reads our request count; the row after RSS is ours just after that scrape (client-go's " +
		"program has none). Leaderships lost in the window: -1 when not all N were elected within " +
		"120 s. Then the shipped library: its size (stripped), and `tests/bench/load_time.c`: " +
		"`dlopen` of it, `K8sLeaseInit`, and the RSS after both, 15 runs."},
}

// runInfo names the run a section's table comes from: written as one line
// above the table.
type runInfo struct {
	date     string // YYYY-MM-DD, UTC
	machine  string // e.g. "2 cores, 24 GiB (vm)"
	versions string // e.g. "k8s-lease 0.1.0, client-go v0.37.2, kube-apiserver v1.37.2, go1.26.8"
	command  string // e.g. "make bench BENCH_FLAGS=-only=scale"
}

func (r runInfo) line() string {
	return fmt.Sprintf("Measured %s on %s; %s; `%s`.", r.date, r.machine, r.versions, r.command)
}

func pageMarkers(section string) (begin, end string) {
	return "<!-- table of " + section + " -->", "<!-- end of table of " + section + " -->"
}

// pageTables returns the text between each section's markers in page: the
// tables to keep. A section without both markers is absent.
func pageTables(page string) map[string]string {
	tables := map[string]string{}
	for _, s := range pageSections {
		begin, end := pageMarkers(s.name)
		_, rest, ok := strings.Cut(page, begin+"\n")
		if !ok {
			continue
		}
		if table, _, ok := strings.Cut(rest, end); ok {
			tables[s.name] = table
		}
	}
	return tables
}

// sectionTable is what goes between a section's markers for its rows of a
// run: the run's line, then the table.
func sectionTable(run runInfo, rows []series) string {
	return run.line() + "\n\n" + table(rows)
}

// updatePage renders the page from old (the page as it is; empty: none)
// and the results of run: each section with rows in results gets a new
// table, the others keep theirs. It returns the sections it replaced.
func updatePage(old string, run runInfo, results []series) (string, []string) {
	tables := pageTables(old)
	var updated []string
	for _, s := range pageSections {
		var rows []series
		for _, r := range results {
			if r.Section == s.name {
				rows = append(rows, r)
			}
		}
		if len(rows) > 0 {
			tables[s.name] = sectionTable(run, rows)
			if drawnSections[s.name] {
				tables[s.name] += pictureLink(s.name)
			}
			updated = append(updated, s.name)
		}
	}
	var b strings.Builder
	b.WriteString(pageHeader + "\n" + pageIntro)
	for _, s := range pageSections {
		fmt.Fprintf(&b, "\n## %s (`%s`)\n\n%s\n\n", s.title, s.name, s.read)
		table, ok := tables[s.name]
		if !ok {
			command := "make bench BENCH_FLAGS=-only=" + s.name
			if s.writtenBy != "" {
				command = s.writtenBy
			}
			table = fmt.Sprintf("Not measured yet: `%s`.\n", command)
		}
		begin, end := pageMarkers(s.name)
		b.WriteString(begin + "\n" + table + end + "\n")
	}
	return b.String(), updated
}

// writePage updates the page read from in (missing: a new page) with the
// results of run and writes it to out; it returns the sections replaced.
func writePage(in, out string, run runInfo, results []series) ([]string, error) {
	old, err := os.ReadFile(in)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	page, updated := updatePage(string(old), run, results)
	if err := os.MkdirAll(filepath.Join(filepath.Dir(out), "images"), 0o755); err != nil {
		return nil, err
	}
	// The pictures the updated tables link to, beside the page.
	for _, section := range updated {
		if !drawnSections[section] {
			continue
		}
		var rows []series
		for _, r := range results {
			if r.Section == section {
				rows = append(rows, r)
			}
		}
		svg, err := distributionSVG(rows, section+": "+run.date)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(out), "images", "bench-"+section+".svg"), []byte(svg), 0o644); err != nil {
			return nil, err
		}
	}
	return updated, os.WriteFile(out, []byte(page), 0o644)
}
