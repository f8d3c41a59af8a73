package capi

// Tests of the C ABI called from Go. A _test.go file cannot use cgo, so the
// C types are named by the names cgo generates for them in this package
// (_Ctype_char for C.char), and C strings are made from Go memory: the
// exports only read them, as they read C memory.

import (
	"strings"
	"testing"
	"unsafe"

	"github.com/k8s-lease/k8s-lease/lease"
)

// cs returns a NUL-terminated copy of s as the C char* type.
func cs(s string) *cchar {
	b := append([]byte(s), 0)
	return (*cchar)(unsafe.Pointer(&b[0]))
}

type (
	cchar    = _Ctype_char     // C.char
	longlong = _Ctype_longlong // C.longlong
)

// goStr reads a NUL-terminated C string.
func goStr(p *cchar) string {
	if p == nil {
		return ""
	}
	var sb strings.Builder
	for ptr := unsafe.Pointer(p); *(*byte)(ptr) != 0; ptr = unsafe.Add(ptr, 1) {
		sb.WriteByte(*(*byte)(ptr))
	}
	return sb.String()
}

// takeMsg returns and frees an error message set by an export.
func takeMsg(p **cchar) string {
	s := goStr(*p)
	K8sLeaseFree(unsafe.Pointer(*p))
	*p = nil
	return s
}

func TestGuardTurnsPanicIntoError(t *testing.T) {
	rc, err := guard(func() (int, error) { panic("boom") })
	if rc != -1 || err == nil || !strings.HasPrefix(err.Error(), "internal error: boom") {
		t.Fatalf("guard(panic) = %d, %v", rc, err)
	}
	rc, err = guard(func() (int, error) { return 1, nil })
	if rc != 1 || err != nil {
		t.Fatalf("guard(ok) = %d, %v", rc, err)
	}
}

func TestVersionIsStatic(t *testing.T) {
	if a, b := K8sLeaseVersion(), K8sLeaseVersion(); a != b || goStr(a) != lease.Version {
		t.Fatalf("K8sLeaseVersion = %q (%p, %p)", goStr(a), a, b)
	}
}

func TestNullArgumentsNeverCrash(t *testing.T) {
	var msg *cchar
	calls := []struct {
		name string
		rc   func(**cchar) int32
		want string
	}{
		{"RunElection", func(m **cchar) int32 { return int32(K8sLeaseRunElection(nil, cs("l"), cs("id"), 5, 4, 1, m)) }, "namespace: must not be NULL"},
		{"RunElectionMs", func(m **cchar) int32 {
			return int32(K8sLeaseRunElectionMs(cs("ns"), nil, cs("id"), 5000, 4000, 1000, m))
		}, "lease name: must not be NULL"},
		{"RunElection identity", func(m **cchar) int32 { return int32(K8sLeaseRunElection(cs("ns"), cs("l"), nil, 5, 4, 1, m)) }, "identity: must not be NULL"},
		{"WaitElected", func(m **cchar) int32 { return int32(K8sLeaseWaitElected(nil, nil, 1, nil, m)) }, "namespace: must not be NULL"},
		{"WaitLost", func(m **cchar) int32 { return int32(K8sLeaseWaitLost(nil, nil, m)) }, "namespace: must not be NULL"},
		{"CancelElection", func(m **cchar) int32 { return int32(K8sLeaseCancelElection(cs("ns"), nil, m)) }, "lease name: must not be NULL"},
		{"IsLeader", func(m **cchar) int32 { return int32(K8sLeaseIsLeader(nil, nil, nil, nil, m)) }, "namespace: must not be NULL"},
		{"GetHolder", func(m **cchar) int32 { return int32(K8sLeaseGetHolder(nil, nil, nil, nil, m)) }, "namespace: must not be NULL"},
		{"WatchHolder", func(m **cchar) int32 { return int32(K8sLeaseWatchHolder(cs("ns"), cs("l"), nil, nil, m)) }, "callbackFunc: must not be NULL"},
		{"CancelWatch", func(m **cchar) int32 { return int32(K8sLeaseCancelWatch(nil, nil, m)) }, "namespace: must not be NULL"},
		{"PatchPodLabel", func(m **cchar) int32 { return int32(K8sPatchPodLabel(cs("ns"), cs("p"), cs("k"), nil, m)) }, "label value: must not be NULL"},
		{"RemovePodLabel", func(m **cchar) int32 { return int32(K8sRemovePodLabel(cs("ns"), cs("p"), nil, m)) }, "label key: must not be NULL"},
		{"Shutdown", func(m **cchar) int32 { return int32(K8sLeaseShutdown(0, m)) }, "timeoutMs: must be > 0"},
		{"WaitElected timeout", func(m **cchar) int32 { return int32(K8sLeaseWaitElected(cs("ns"), cs("l"), 0, nil, m)) }, "timeoutSec: must be > 0"},
		{"bad timing", func(m **cchar) int32 { return int32(K8sLeaseRunElection(cs("ns"), cs("l"), cs("id"), 4, 5, 1, m)) }, "must be greater than renew deadline"},
		{"sub-second lease", func(m **cchar) int32 {
			return int32(K8sLeaseRunElectionMs(cs("ns"), cs("l"), cs("id"), 800, 500, 100, m))
		}, "lease duration: must be >= 1s"},
		{"Stats", func(m **cchar) int32 { return int32(K8sLeaseStats(nil, m)) }, "statsJson: must not be NULL"},
		{"HandOff NULL target", func(m **cchar) int32 { return int32(K8sLeaseHandOff(cs("ns"), cs("l"), nil, 100, m)) }, "toIdentity: must not be NULL"},
		{"HandOff timeout", func(m **cchar) int32 { return int32(K8sLeaseHandOff(cs("ns"), cs("l"), cs("b"), 0, m)) }, "timeoutMs: must be > 0"},
		{"HandOff timeout overflows", func(m **cchar) int32 {
			return int32(K8sLeaseHandOff(cs("ns"), cs("l"), cs("b"), 1<<62, m))
		}, "timeoutMs: must be > 0 and at most"},
		{"HandOffId id", func(m **cchar) int32 { return int32(K8sLeaseHandOffId(cs("ns"), cs("l"), 0, cs("b"), 100, m)) }, "electionId: must be > 0"},
		{"HandOffId timeout", func(m **cchar) int32 { return int32(K8sLeaseHandOffId(cs("ns"), cs("l"), 1, cs("b"), 0, m)) }, "timeoutMs: must be > 0"},
		{"WaitElectedMsId timeout", func(m **cchar) int32 { return int32(K8sLeaseWaitElectedMsId(cs("ns"), cs("l"), 1, 0, nil, m)) }, "timeoutMs: must be > 0"},
		{"WaitElectedMsId timeout overflows", func(m **cchar) int32 {
			return int32(K8sLeaseWaitElectedMsId(cs("ns"), cs("l"), 1, 1<<62, nil, m))
		}, "timeoutMs: must be > 0 and at most"},
		{"WaitElectedMsId id", func(m **cchar) int32 { return int32(K8sLeaseWaitElectedMsId(cs("ns"), cs("l"), 0, 1000, nil, m)) }, "electionId: must be > 0"},
		{"LeasePatchPodLabel NULL value removes", func(m **cchar) int32 { return int32(K8sLeasePatchPodLabel(cs("ns"), cs("p"), nil, nil, m)) }, "label key: must not be NULL"},
		{"Metrics", func(m **cchar) int32 { return int32(K8sLeaseMetrics(nil, m)) }, "text: must not be NULL"},
		{"SetLogLevel", func(m **cchar) int32 { return int32(K8sLeaseSetLogLevel(99, m)) }, "log level: must be 0..12"},
		{"bad name", func(m **cchar) int32 { return int32(K8sLeaseIsLeader(cs("ns"), cs("Bad_Name"), nil, nil, m)) }, `lease name "Bad_Name"`},
	}
	for _, c := range calls {
		if rc := c.rc(&msg); rc != -1 {
			t.Errorf("%s: rc = %d, want -1", c.name, rc)
		}
		if got := takeMsg(&msg); !strings.Contains(got, c.want) {
			t.Errorf("%s: message %q, want it to contain %q", c.name, got, c.want)
		}
		if rc := c.rc(nil); rc != -1 { // NULL errMsg: same answer, no message
			t.Errorf("%s with NULL errMsg: rc = %d", c.name, rc)
		}
	}
}

func TestNoElectionAnswers(t *testing.T) {
	var msg *cchar
	var token, valid int64 = 7, 7
	if rc := K8sLeaseIsLeader(cs("ns"), cs("none"), (*longlong)(unsafe.Pointer(&token)), (*longlong)(unsafe.Pointer(&valid)), &msg); rc != 0 || token != 0 || valid != 0 {
		t.Fatalf("IsLeader without election = %d (token %d, valid %d), %q", rc, token, valid, takeMsg(&msg))
	}
	if rc := K8sLeaseWaitLost(cs("ns"), cs("none"), &msg); rc != 0 {
		t.Fatalf("WaitLost without election = %d, %q", rc, takeMsg(&msg))
	}
	if rc := K8sLeaseCancelElection(cs("ns"), cs("none"), &msg); rc != 0 {
		t.Fatalf("CancelElection without election = %d, %q", rc, takeMsg(&msg))
	}
	if rc := K8sLeaseWaitElected(cs("ns"), cs("none"), 1, nil, &msg); rc != -1 || !strings.Contains(takeMsg(&msg), "no election") {
		t.Fatalf("WaitElected without election = %d", rc)
	}
	if rc := K8sLeaseWaitElectedMsId(cs("ns"), cs("none"), 1, 1000, nil, &msg); rc != -1 || !strings.Contains(takeMsg(&msg), "no election") {
		t.Fatalf("WaitElectedMsId without election = %d", rc)
	}
}

// WaitElected's fencing token is zeroed on every error, as every other
// out-parameter is: a caller that reads it after -1 never sees a stale
// token (one of an earlier term) as this one's.
func TestWaitElectedZeroesTheTokenOnError(t *testing.T) {
	for _, c := range []struct {
		name string
		call func(token *longlong, m **cchar) _Ctype_int
	}{
		{"WaitElectedMsId without election", func(tok *longlong, m **cchar) _Ctype_int {
			return K8sLeaseWaitElectedMsId(cs("ns"), cs("none"), 1, 1000, tok, m)
		}},
		{"WaitElectedMsId bad timeout", func(tok *longlong, m **cchar) _Ctype_int {
			return K8sLeaseWaitElectedMsId(cs("ns"), cs("none"), 1, 0, tok, m)
		}},
		{"WaitElectedMsId bad id", func(tok *longlong, m **cchar) _Ctype_int {
			return K8sLeaseWaitElectedMsId(cs("ns"), cs("none"), 0, 1000, tok, m)
		}},
		{"WaitElected without election", func(tok *longlong, m **cchar) _Ctype_int { return K8sLeaseWaitElected(cs("ns"), cs("none"), 1, tok, m) }},
		{"WaitElected NULL namespace", func(tok *longlong, m **cchar) _Ctype_int { return K8sLeaseWaitElected(nil, cs("none"), 1, tok, m) }},
	} {
		var msg *cchar
		var token int64 = 7
		if rc := c.call((*longlong)(unsafe.Pointer(&token)), &msg); rc != -1 || token != 0 {
			t.Errorf("%s: rc %d, token %d (want -1 and 0); %q", c.name, rc, token, takeMsg(&msg))
		}
		takeMsg(&msg)
	}
}
