// Package lease is the core of k8s-lease: leader election on
// coordination.k8s.io/v1 Leases, in pure Go, behind the C ABI of package
// capi. A Manager owns the client and every election, holder watch and
// observer of a process; an Election is one candidacy.
//
// # Guarantees
//
//   - Among k8s-lease processes and plain client-go LeaderElectors on the
//     same Lease, IsLeader is true in at most one process at a time, under
//     the clock assumption below: a leader reports itself leader only until
//     its last successful renewal's send time + renewDeadline, and a standby
//     takes a held Lease only a full leaseDuration after the last change it
//     saw; at once only a Lease whose holder's term is known to be over (a
//     release written by that holder, a Lease never held or deleted), a
//     hand-off record naming it, or its own acquisition that landed while
//     its answer was lost (that very write: incarnation, token and
//     renewTime; docs/guarantees.md has each case and the test that shows
//     it).
//   - Every write of a leader is a compare-and-swap: acquisitions and
//     releases on the resourceVersion, renewals by a JSON patch whose tests
//     check holder, incarnation, token and duration. A foreign write ends
//     leadership at the next renewal at the latest.
//   - The fencing token (spec.leaseTransitions at acquisition) rises with
//     every leadership this process sees, also across a deleted and
//     re-created Lease.
//   - Nothing here calls host code (the log sink, holder callbacks) with a
//     lock held or on the renewal path; a callback may call any function of
//     the package, Shutdown included.
//   - A panic on the library's own goroutines ends that election or holder
//     watch with ErrInternal; it never reaches the host.
//
// # Limits
//
//   - Safety rests on clocks that advance at nearly the same rate and on
//     pauses shorter than leaseDuration − renewDeadline: a leader paused
//     longer may act after a standby took over. Protect storage with the
//     fencing token.
//   - Two processes of ours with one identity never both lead (each election
//     carries an incarnation); a client-go candidate with the identity of
//     one of ours does not know the incarnation and can.
//   - Edits to the Lease by others are detected, not prevented.
//   - Events, metrics and candidate records are best effort: their failure
//     never changes an election, and is logged.
//
// # Cost
//
// One goroutine per election (the candidate or leader loop) and per observed
// Lease. A leader renews on its own goroutine while the API server answers
// fast, and on workers (process.go) once a renewal went unanswered for
// inlineCut (half a retry period at most), or always where renewDeadline <=
// 4/3 retryPeriod. The renewals of one process go out in bursts: at least 8
// slots per retry period, and one per 16 leaders above 128 (renewalSlot);
// a burst wakes the process once. A standby keeps one watch per Lease, renewed every few
// minutes where the transport finds dead connections by itself (watchLife);
// a leader does not watch its own Lease. Elections started together make
// their first round of requests (a list, a watch, the first acquisition)
// at most 16 at a time, process-wide (firstRounds): the others wait for a
// place, which bounds the startup burst whose memory a process would keep;
// renewals, retries and a standby's takeover never wait. The API is reached
// through package kubeapi, which links only the coordination types.
//
// # Where things are
//
// This is the one map of the files of lease/ (docs/layout.md links here); a
// file's tests are in <file>_test.go, and those that need a cluster in
// <file>_integration_test.go.
//
//   - campaign.go: the candidate's rule, decide(snapshot, now,
//     ownLeaseDuration, self, unanswered), a pure function, and the loop
//     that acts on it (acquire, create, adopt an acquisition of its own
//     whose answer was lost, wait); acquire also starts a term's validity
//     (send time + renewDeadline).
//   - leader.go: the leader's loop, lead: when it renews (firstRenewal,
//     renewalSlot, the retry after an error), how long a success holds
//     (renewed: send time + renewDeadline; the first term's is acquire's),
//     when renewals are pipelined or move to the workers (shouldSend,
//     inlineCut), loss and release. record.go is how a Lease is read and
//     written (holder, token, hand-off record), the fencing token's rule
//     (nextToken) and the renewal's JSON patch; client.go the client
//     (Version, requestTimeout: every request's bound, renewals' too) and
//     the redialling of silent connections.
//   - election.go: an Election and its life (start, WaitElected, WaitLost,
//     Cancel, the ending); validation.go Key, Timing and the argument
//     checks (their rules in internal/validate); options.go the policies
//     and the choice of a preferred holder among candidates; handoff.go the
//     hand-off and acting on a preferred holder; endpoint.go the endpoint a
//     leader publishes; candidates.go a candidate's record while it
//     campaigns; errors.go the errors, a loss's reasons among them, and
//     panicError.
//   - observer.go and snapshot.go: the shared view of one Lease (list and
//     watch, what a read may change); observers.go the Manager's observers
//     and their reaper; holder.go GetHolder and holder watches.
//   - manager.go: the Manager (elections, ends, Shutdown, Init); process.go
//     the state that is the process's and the scheduling around requests
//     (the renewal workers, the first-round gate, backoff);
//     panic_inject_on.go and panic_inject_off.go the panic test hook (one
//     of the pair is built, by the k8s_lease_panic_inject tag).
//   - What the library reports goes through interfaces the core owns
//     (eventSink, metricsSink; candidateStore in candidates.go); delivery
//     and formatting live in lease/internal.
//   - A new Event: what it says (type, reason, message) is decided here,
//     in events.go (eventReason; a hand-off's end in handoff.go,
//     recordHandOff) and sent with recordEvent; lease/internal/events
//     writes it (queue, retries, a spam filter keyed on lease, uid,
//     identity and type, not reason).
//   - A new metric: a counter and its method on telemetry.LeaseCounters
//     (lease/internal/telemetry/counters.go; an ElectionStats field too if
//     K8sLeaseStats shows it), its family in telemetry's text.go, a
//     metricsSink method in metrics.go when an Election or observer counts
//     it (Manager code counts on m.statsLocked(key) directly), and its line
//     in include/k8s_lease.h and docs/operations.md.
//   - log.go and podlabel.go are the log and pod-label API, over
//     lease/internal/logs and lease/internal/podlabel.
//
// Below lease/, each package does one thing for the core:
//
//   - lease/kubeapi: the minimal Lease/Event client: Leases,
//     LeaseCandidates, Events, EndpointSlices, a Pod patch and one
//     discovery question on client-go's REST client, protobuf for the
//     coordination types; no typed clientset, so no kubernetes/scheme (make
//     check-deps refuses it in the library).
//   - lease/internal/events: Kubernetes Events on leadership changes, off
//     the election path.
//   - lease/internal/telemetry: metrics, stats, request counting, the
//     Prometheus text.
//   - lease/internal/candidates: the candidate-record stores (Leases or
//     LeaseCandidates).
//   - lease/internal/endpoints: the EndpointSlice that routes a
//     selector-less Service to its leader.
//   - lease/internal/logs: the host's log sink.
//   - lease/internal/kubeconfig: client construction: in-cluster, else
//     kubeconfig.
//   - lease/internal/podlabel: the pod-label patch.
//   - lease/internal/validate: argument validation (fuzzed there).
package lease
