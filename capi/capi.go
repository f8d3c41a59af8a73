package capi

// The exports. Each converts its C arguments, calls the pure-Go core in
// package lease, maps errors to return codes and messages, and recovers
// panics. The contract is documented in include/k8s_lease.h.

/*
#include <stdlib.h>
#include "capi.h"
*/
import "C"

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/k8s-lease/k8s-lease/internal/runtimecheck"
	"github.com/k8s-lease/k8s-lease/lease"
)

// lib is the process's single manager: every C call works on it. Every
// function that needs the cluster initializes it on first use, with the
// checks of K8sLeaseInit (prepareInit) first.
var lib = newLib()

func newLib() *lease.Manager {
	m := lease.NewManager(nil)
	m.SetInitHook(prepareInit)
	return m
}

// version is handed to C once and never freed (K8sLeaseVersion's contract).
var version = C.CString(lease.Version)

// guard runs f, turning a panic into an "internal error" so that no Go panic
// ever unwinds into C.
func guard(f func() (int, error)) (rc int, err error) {
	defer func() {
		if p := recover(); p != nil {
			rc, err = -1, fmt.Errorf("internal error: %v\n%s", p, debug.Stack())
		}
	}()
	return f()
}

// export runs an exported call: -1 with *errMsg set on error. A NULL errMsg
// means the caller wants no message.
func export(errMsg **C.char, f func() (int, error)) C.int {
	if errMsg != nil {
		*errMsg = nil
	}
	rc, err := guard(f)
	if err != nil {
		if rc >= 0 {
			rc = -1
		}
		if errMsg != nil {
			*errMsg = C.CString(err.Error())
		}
	}
	return C.int(rc)
}

// goString converts a required C string argument.
func goString(field string, p *C.char) (string, error) {
	if p == nil {
		return "", fmt.Errorf("%w: %s: must not be NULL", lease.ErrInvalidArgument, field)
	}
	return C.GoString(p), nil
}

// goStrings converts required C string arguments, in order, naming the
// first NULL one.
func goStrings(fields []string, ps ...*C.char) ([]string, error) {
	out := make([]string, len(ps))
	for i, p := range ps {
		s, err := goString(fields[i], p)
		if err != nil {
			return nil, err
		}
		out[i] = s
	}
	return out, nil
}

// initEnv lists the environment variables Init reads.
var initEnv = []string{"KUBECONFIG", "HOME", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "K8S_LEASE_EVENTS"}

// syncEnv copies initEnv from the C environment into Go's. The Go runtime
// takes its own copy of the environment when the library loads, so without
// this a host's setenv() before K8sLeaseInit would go unseen.
func syncEnv() error {
	for _, name := range initEnv {
		cname := C.CString(name)
		v := C.getenv(cname)
		C.free(unsafe.Pointer(cname))
		var err error
		if v == nil {
			err = os.Unsetenv(name)
		} else {
			err = os.Setenv(name, C.GoString(v))
		}
		if err != nil {
			return fmt.Errorf("read %s from the environment: %w", name, err)
		}
	}
	return nil
}

//export K8sLeaseInit
func K8sLeaseInit(errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		_, err := lib.Init()
		return 0, err
	})
}

// prepareInit runs before the configuration is loaded, on each attempt: it
// refuses a process with a second Go runtime and reads the host's
// environment.
func prepareInit() error {
	if err := refuseSecondGoRuntime(); err != nil {
		return err
	}
	return syncEnv()
}

// refuseSecondGoRuntime fails when another Go c-shared library is loaded:
// Go does not support two runtimes in one process (they crash at random).
func refuseSecondGoRuntime() error {
	other, err := runtimecheck.OtherGoRuntime()
	if err != nil {
		return fmt.Errorf("cannot tell whether another Go runtime is loaded: %w", err)
	}
	if other != "" {
		return fmt.Errorf("another Go runtime is loaded in this process (%s): Go does not support two Go c-shared libraries in one process, and they crash unpredictably; link only one: build the other Go code and k8s-lease into one library (import _ \"github.com/k8s-lease/k8s-lease/capi\" in it)",
			other)
	}
	return nil
}

//export K8sLeaseRunElection
func K8sLeaseRunElection(ns, leaseName, identity *C.char, leaseDurationSec, renewDeadlineSec, retryPeriodSec C.int, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		t, err := lease.TimingFromSeconds(int(leaseDurationSec), int(renewDeadlineSec), int(retryPeriodSec))
		if err != nil {
			return -1, err
		}
		return runElection(ns, leaseName, identity, t, lease.ElectionOptions{}, nil)
	})
}

//export K8sLeaseRunElectionMs
func K8sLeaseRunElectionMs(ns, leaseName, identity *C.char, leaseDurationMs, renewDeadlineMs, retryPeriodMs C.longlong, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		t, err := lease.TimingFromMillis(int64(leaseDurationMs), int64(renewDeadlineMs), int64(retryPeriodMs))
		if err != nil {
			return -1, err
		}
		return runElection(ns, leaseName, identity, t, lease.ElectionOptions{}, nil)
	})
}

//export K8sLeaseRunElectionMsId
func K8sLeaseRunElectionMsId(ns, leaseName, identity *C.char, leaseDurationMs, renewDeadlineMs, retryPeriodMs C.longlong, electionId *C.longlong, errMsg **C.char) C.int {
	if electionId != nil {
		*electionId = 0
	}
	return export(errMsg, func() (int, error) {
		t, err := lease.TimingFromMillis(int64(leaseDurationMs), int64(renewDeadlineMs), int64(retryPeriodMs))
		if err != nil {
			return -1, err
		}
		return runElection(ns, leaseName, identity, t, lease.ElectionOptions{}, electionId)
	})
}

//export K8sLeaseRunElectionWith
func K8sLeaseRunElectionWith(ns, leaseName, identity *C.char, leaseDurationMs, renewDeadlineMs, retryPeriodMs C.longlong,
	version *C.char, priority C.int, policy C.int, electionId *C.longlong, errMsg **C.char) C.int {
	if electionId != nil {
		*electionId = 0
	}
	return export(errMsg, func() (int, error) {
		t, err := lease.TimingFromMillis(int64(leaseDurationMs), int64(renewDeadlineMs), int64(retryPeriodMs))
		if err != nil {
			return -1, err
		}
		opts := lease.ElectionOptions{Priority: int32(priority), Policy: lease.Policy(policy)}
		if version != nil { // NULL: none declared
			opts.Version = C.GoString(version)
		}
		return runElection(ns, leaseName, identity, t, opts, electionId)
	})
}

//export K8sLeaseCandidates
func K8sLeaseCandidates(ns, leaseName *C.char, candidatesJson **C.char, errMsg **C.char) C.int {
	if candidatesJson != nil {
		*candidatesJson = nil
	}
	return export(errMsg, func() (int, error) {
		if candidatesJson == nil {
			return -1, fmt.Errorf("%w: candidatesJson: must not be NULL", lease.ErrInvalidArgument)
		}
		s, err := goStrings([]string{"namespace", "lease name"}, ns, leaseName)
		if err != nil {
			return -1, err
		}
		cs, err := lib.Candidates(s[0], s[1])
		if err != nil {
			return -1, err
		}
		if cs == nil {
			cs = []lease.Candidate{}
		}
		out, err := json.Marshal(cs)
		if err != nil {
			return -1, err
		}
		*candidatesJson = C.CString(string(out))
		return 0, nil
	})
}

func runElection(ns, leaseName, identity *C.char, t lease.Timing, opts lease.ElectionOptions, electionId *C.longlong) (int, error) {
	s, err := goStrings([]string{"namespace", "lease name", "identity"}, ns, leaseName, identity)
	if err != nil {
		return -1, err
	}
	e, err := lib.RunElectionWith(s[0], s[1], s[2], t, opts)
	if err != nil {
		return -1, err
	}
	if electionId != nil {
		*electionId = C.longlong(e.ID())
	}
	return 0, nil
}

// election finds the election on ns/leaseName that id names (idField ""
// and id 0: whichever is there); nil (no error) when there is none.
func election(ns, leaseName *C.char, idField string, id int64) (*lease.Election, error) {
	if idField != "" && id <= 0 {
		return nil, fmt.Errorf("%w: %s: must be > 0, got %d", lease.ErrInvalidArgument, idField, id)
	}
	s, err := goStrings([]string{"namespace", "lease name"}, ns, leaseName)
	if err != nil {
		return nil, err
	}
	if err := lease.ValidateKey(s[0], s[1]); err != nil {
		return nil, err
	}
	return lib.ElectionID(s[0], s[1], id), nil
}

//export K8sLeaseWaitElected
func K8sLeaseWaitElected(ns, leaseName *C.char, timeoutSec C.int, fencingToken *C.longlong, errMsg **C.char) C.int {
	return waitElected(ns, leaseName, "", 0, seconds(timeoutSec), fencingToken, errMsg)
}

//export K8sLeaseWaitElectedId
func K8sLeaseWaitElectedId(ns, leaseName *C.char, electionId C.longlong, timeoutSec C.int, fencingToken *C.longlong, errMsg **C.char) C.int {
	return waitElected(ns, leaseName, "electionId", int64(electionId), seconds(timeoutSec), fencingToken, errMsg)
}

//export K8sLeaseWaitElectedMsId
func K8sLeaseWaitElectedMsId(ns, leaseName *C.char, electionId C.longlong, timeoutMs C.longlong, fencingToken *C.longlong, errMsg **C.char) C.int {
	return waitElected(ns, leaseName, "electionId", int64(electionId), millis(timeoutMs), fencingToken, errMsg)
}

// timeout is a timeout argument as C gave it: its name, for the error, and
// its length (0 when it is not > 0 or does not fit a time.Duration).
type timeout struct {
	field string
	arg   int64
	d     time.Duration
}

func seconds(s C.int) timeout {
	return timeout{"timeoutSec", int64(s), time.Duration(max(s, 0)) * time.Second}
}

// maxMs is the longest timeout in milliseconds a time.Duration holds.
const maxMs = int64(time.Duration(1<<63-1) / time.Millisecond)

func millis(ms C.longlong) timeout {
	t := timeout{field: "timeoutMs", arg: int64(ms)}
	if ms > 0 && int64(ms) <= maxMs {
		t.d = time.Duration(ms) * time.Millisecond
	}
	return t
}

func (t timeout) check() error {
	switch {
	case t.arg <= 0:
		return fmt.Errorf("%w: %s: must be > 0, got %d", lease.ErrInvalidArgument, t.field, t.arg)
	case t.d <= 0:
		return fmt.Errorf("%w: %s: must be > 0 and at most %d, got %d", lease.ErrInvalidArgument, t.field, maxMs, t.arg)
	}
	return nil
}

func waitElected(ns, leaseName *C.char, idField string, id int64, t timeout, fencingToken *C.longlong, errMsg **C.char) C.int {
	if fencingToken != nil {
		*fencingToken = 0 // on every error too, as every out-parameter
	}
	return export(errMsg, func() (int, error) {
		if err := t.check(); err != nil {
			return -1, err
		}
		e, err := election(ns, leaseName, idField, id)
		if err != nil {
			return -1, err
		}
		if e == nil {
			return -1, lease.ErrNoElection
		}
		token, err := e.WaitElected(t.d)
		if err != nil {
			return -1, err
		}
		if fencingToken != nil {
			*fencingToken = C.longlong(token)
		}
		return 0, nil
	})
}

//export K8sLeaseWaitLost
func K8sLeaseWaitLost(ns, leaseName *C.char, errMsg **C.char) C.int {
	return waitLost(ns, leaseName, "", 0, errMsg)
}

//export K8sLeaseWaitLostId
func K8sLeaseWaitLostId(ns, leaseName *C.char, electionId C.longlong, errMsg **C.char) C.int {
	return waitLost(ns, leaseName, "electionId", int64(electionId), errMsg)
}

func waitLost(ns, leaseName *C.char, idField string, id int64, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		e, err := election(ns, leaseName, idField, id)
		if err != nil {
			return -1, err
		}
		if e == nil {
			return 0, nil // nothing to wait for
		}
		return 0, e.WaitLost()
	})
}

//export K8sLeaseHandOff
func K8sLeaseHandOff(ns, leaseName, toIdentity *C.char, timeoutMs C.longlong, errMsg **C.char) C.int {
	return handOff(ns, leaseName, "", 0, toIdentity, timeoutMs, errMsg)
}

//export K8sLeaseHandOffId
func K8sLeaseHandOffId(ns, leaseName *C.char, electionId C.longlong, toIdentity *C.char, timeoutMs C.longlong, errMsg **C.char) C.int {
	return handOff(ns, leaseName, "electionId", int64(electionId), toIdentity, timeoutMs, errMsg)
}

func handOff(ns, leaseName *C.char, idField string, id int64, toIdentity *C.char, timeoutMs C.longlong, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		if idField != "" && id <= 0 {
			return -1, fmt.Errorf("%w: %s: must be > 0, got %d", lease.ErrInvalidArgument, idField, id)
		}
		s, err := goStrings([]string{"ns", "leaseName", "toIdentity"}, ns, leaseName, toIdentity)
		if err != nil {
			return -1, err
		}
		t := millis(timeoutMs)
		if err := t.check(); err != nil {
			return -1, err
		}
		return 0, lib.HandOffID(s[0], s[1], id, s[2], t.d)
	})
}

//export K8sLeaseCancelElection
func K8sLeaseCancelElection(ns, leaseName *C.char, errMsg **C.char) C.int {
	return cancelByID(ns, leaseName, "", 0, errMsg, lib.CancelElectionID)
}

//export K8sLeaseCancelElectionId
func K8sLeaseCancelElectionId(ns, leaseName *C.char, electionId C.longlong, errMsg **C.char) C.int {
	return cancelByID(ns, leaseName, "electionId", int64(electionId), errMsg, lib.CancelElectionID)
}

// cancelByID ends, through cancel, the election or watch on ns/leaseName
// that id names; idField "" means by name (id 0: whichever runs), else the
// id must be > 0 and idField names it in the error.
func cancelByID(ns, leaseName *C.char, idField string, id int64, errMsg **C.char, cancel func(ns, name string, id int64) error) C.int {
	return export(errMsg, func() (int, error) {
		if idField != "" && id <= 0 {
			return -1, fmt.Errorf("%w: %s: must be > 0, got %d", lease.ErrInvalidArgument, idField, id)
		}
		s, err := goStrings([]string{"namespace", "lease name"}, ns, leaseName)
		if err != nil {
			return -1, err
		}
		return 0, cancel(s[0], s[1], id)
	})
}

//export K8sLeaseIsLeader
func K8sLeaseIsLeader(ns, leaseName *C.char, fencingToken, validForMs *C.longlong, errMsg **C.char) C.int {
	return isLeader(ns, leaseName, "", 0, fencingToken, validForMs, errMsg)
}

//export K8sLeaseIsLeaderId
func K8sLeaseIsLeaderId(ns, leaseName *C.char, electionId C.longlong, fencingToken, validForMs *C.longlong, errMsg **C.char) C.int {
	return isLeader(ns, leaseName, "electionId", int64(electionId), fencingToken, validForMs, errMsg)
}

func isLeader(ns, leaseName *C.char, idField string, id int64, fencingToken, validForMs *C.longlong, errMsg **C.char) C.int {
	if fencingToken != nil {
		*fencingToken = 0
	}
	if validForMs != nil {
		*validForMs = 0
	}
	return export(errMsg, func() (int, error) {
		e, err := election(ns, leaseName, idField, id)
		if err != nil {
			return -1, err
		}
		if e == nil {
			return 0, nil
		}
		leader, token, left := e.IsLeader()
		if !leader {
			return 0, nil
		}
		if fencingToken != nil {
			*fencingToken = C.longlong(token)
		}
		if validForMs != nil {
			*validForMs = C.longlong(left / time.Millisecond)
		}
		return 1, nil
	})
}

//export K8sLeasePublishEndpoint
func K8sLeasePublishEndpoint(ns, leaseName *C.char, electionId C.longlong, service, address *C.char, port C.int, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		if electionId <= 0 {
			return -1, fmt.Errorf("%w: electionId: must be > 0, got %d", lease.ErrInvalidArgument, int64(electionId))
		}
		s, err := goStrings([]string{"ns", "leaseName", "service", "address"}, ns, leaseName, service, address)
		if err != nil {
			return -1, err
		}
		ep := lease.Endpoint{Service: s[2], Address: s[3], Port: int(port)}
		return 0, lib.PublishEndpoint(s[0], s[1], int64(electionId), ep)
	})
}

//export K8sLeaseGetHolder
func K8sLeaseGetHolder(ns, leaseName *C.char, holderIdentity **C.char, fencingToken *C.longlong, errMsg **C.char) C.int {
	if holderIdentity != nil {
		*holderIdentity = nil
	}
	if fencingToken != nil {
		*fencingToken = 0
	}
	return export(errMsg, func() (int, error) {
		s, err := goStrings([]string{"namespace", "lease name"}, ns, leaseName)
		if err != nil {
			return -1, err
		}
		st, err := lib.GetHolder(s[0], s[1])
		if err != nil {
			return -1, err
		}
		if !st.Exists {
			return 1, nil
		}
		if holderIdentity != nil && st.Holder != "" {
			*holderIdentity = C.CString(st.Holder)
		}
		if fencingToken != nil {
			*fencingToken = C.longlong(st.Token)
		}
		return 0, nil
	})
}

//export K8sLeaseWatchHolder
func K8sLeaseWatchHolder(ns, leaseName *C.char, callbackCtx unsafe.Pointer, callbackFunc C.k8s_lease_holder_change_cb_t, errMsg **C.char) C.int {
	return watchHolder(ns, leaseName, callbackCtx, callbackFunc, nil, errMsg)
}

//export K8sLeaseWatchHolderId
func K8sLeaseWatchHolderId(ns, leaseName *C.char, callbackCtx unsafe.Pointer, callbackFunc C.k8s_lease_holder_change_cb_t, watchId *C.longlong, errMsg **C.char) C.int {
	if watchId != nil {
		*watchId = 0
	}
	return watchHolder(ns, leaseName, callbackCtx, callbackFunc, watchId, errMsg)
}

func watchHolder(ns, leaseName *C.char, callbackCtx unsafe.Pointer, callbackFunc C.k8s_lease_holder_change_cb_t, watchId *C.longlong, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		s, err := goStrings([]string{"namespace", "lease name"}, ns, leaseName)
		if err != nil {
			return -1, err
		}
		if callbackFunc == nil {
			return -1, fmt.Errorf("%w: callbackFunc: must not be NULL", lease.ErrInvalidArgument)
		}
		// callbackCtx is the host's C pointer, opaque to us and never dereferenced.
		w, err := lib.WatchHolder(s[0], s[1], func(st lease.HolderState) {
			callHolderCallback(callbackFunc, callbackCtx, st)
		})
		if err != nil {
			return -1, err
		}
		if watchId != nil {
			*watchId = C.longlong(w.ID())
		}
		return 0, nil
	})
}

// callHolderCallback hands one state to the host: holder NULL when there is
// none; the string is ours and freed when the callback returns.
func callHolderCallback(cb C.k8s_lease_holder_change_cb_t, ctx unsafe.Pointer, st lease.HolderState) {
	var holder *C.char
	if st.Holder != "" {
		holder = C.CString(st.Holder)
		defer C.free(unsafe.Pointer(holder))
	}
	C.k8s_lease_call_holder_cb(cb, ctx, holder, C.size_t(len(st.Holder)), C.int64_t(st.Token))
}

//export K8sLeaseCancelWatch
func K8sLeaseCancelWatch(ns, leaseName *C.char, errMsg **C.char) C.int {
	return cancelByID(ns, leaseName, "", 0, errMsg, lib.CancelWatchID)
}

//export K8sLeaseCancelWatchId
func K8sLeaseCancelWatchId(ns, leaseName *C.char, watchId C.longlong, errMsg **C.char) C.int {
	return cancelByID(ns, leaseName, "watchId", int64(watchId), errMsg, lib.CancelWatchID)
}

//export K8sPatchPodLabel
func K8sPatchPodLabel(ns, podName, labelKey, labelValue *C.char, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		s, err := goStrings([]string{"namespace", "pod name", "label key", "label value"}, ns, podName, labelKey, labelValue)
		if err != nil {
			return -1, err
		}
		return 0, lib.PatchPodLabel(s[0], s[1], s[2], s[3])
	})
}

//export K8sLeasePatchPodLabel
func K8sLeasePatchPodLabel(ns, podName, labelKey, labelValue *C.char, errMsg **C.char) C.int {
	if labelValue == nil { // JSON merge patch's null: remove
		return K8sRemovePodLabel(ns, podName, labelKey, errMsg)
	}
	return K8sPatchPodLabel(ns, podName, labelKey, labelValue, errMsg)
}

//export K8sRemovePodLabel
func K8sRemovePodLabel(ns, podName, labelKey *C.char, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		s, err := goStrings([]string{"namespace", "pod name", "label key"}, ns, podName, labelKey)
		if err != nil {
			return -1, err
		}
		return 0, lib.RemovePodLabel(s[0], s[1], s[2])
	})
}

//export K8sLeaseShutdown
func K8sLeaseShutdown(timeoutMs C.int, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		if timeoutMs <= 0 {
			return -1, fmt.Errorf("%w: timeoutMs: must be > 0, got %d", lease.ErrInvalidArgument, timeoutMs)
		}
		return 0, lib.Shutdown(time.Duration(timeoutMs) * time.Millisecond)
	})
}

//export K8sLeaseSetLogger
func K8sLeaseSetLogger(callbackCtx unsafe.Pointer, callbackFunc C.k8s_lease_log_cb_t, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		if callbackFunc == nil {
			lease.SetLogSink(nil) // back to standard error
			return 0, nil
		}
		lease.SetLogSink(func(level lease.Level, msg string) {
			cmsg := C.CString(msg)
			defer C.free(unsafe.Pointer(cmsg))
			C.k8s_lease_call_log_cb(callbackFunc, callbackCtx, C.int(level), cmsg, C.size_t(len(msg)))
		})
		return 0, nil
	})
}

//export K8sLeaseSetLogLevel
func K8sLeaseSetLogLevel(level C.int, errMsg **C.char) C.int {
	return export(errMsg, func() (int, error) {
		return 0, lease.SetLogLevel(lease.Level(level))
	})
}

//export K8sLeaseStats
func K8sLeaseStats(statsJSON **C.char, errMsg **C.char) C.int {
	if statsJSON != nil {
		*statsJSON = nil
	}
	return export(errMsg, func() (int, error) {
		if statsJSON == nil {
			return -1, fmt.Errorf("%w: statsJson: must not be NULL", lease.ErrInvalidArgument)
		}
		out, err := json.Marshal(map[string]any{"version": lease.Version, "log_lines_dropped": lease.LogsDropped(),
			"leases": lib.Stats()})
		if err != nil {
			return -1, err
		}
		*statsJSON = C.CString(string(out))
		return 0, nil
	})
}

//export K8sLeaseMetrics
func K8sLeaseMetrics(text **C.char, errMsg **C.char) C.int {
	if text != nil {
		*text = nil
	}
	return export(errMsg, func() (int, error) {
		if text == nil {
			return -1, fmt.Errorf("%w: text: must not be NULL", lease.ErrInvalidArgument)
		}
		*text = C.CString(lib.Metrics())
		return 0, nil
	})
}

//export K8sLeaseFree
func K8sLeaseFree(p unsafe.Pointer) {
	C.free(p) // free(NULL) is a no-op
}

//export K8sLeaseVersion
func K8sLeaseVersion() *C.char {
	return version
}
