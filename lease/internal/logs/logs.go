// Package logs delivers the library's log lines, and client-go's (klog), to
// the host's sink: queued, on a goroutine of their own, so that a slow or
// re-entrant sink never holds up an election. It must not import package
// lease (which forwards its logf and its exported log API here).
package logs

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"k8s.io/klog/v2"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

// Level is a log level: lower is more severe. A message is emitted when its
// level is <= the configured level.
type Level int

// Log levels. Debug+n enables client-go's (klog) verbosity n+1.
const (
	LevelError   Level = 0
	LevelWarning Level = 1
	LevelInfo    Level = 2
	LevelDebug   Level = 3
	MaxLevel     Level = 12
)

// Sink receives every emitted message. Calls are serialized, on a
// goroutine of the library's own (never under a library lock, never on the
// caller's or the renewal path), so a sink may call any function of the
// library, and a slow one delays only the lines behind it.
type Sink func(level Level, msg string)

// logQueueSize bounds the lines waiting for the sink; past it, lines are
// dropped and counted (Dropped) rather than blocking the library.
const logQueueSize = 1024

type logLine struct {
	level Level
	msg   string
	flush chan struct{} // non-nil: a flush marker, closed when reached
}

var logging struct {
	sink      atomic.Pointer[Sink] // nil: stderr
	level     atomic.Int32
	levelMu   sync.Mutex // serializes SetLevel
	dropped   atomic.Int64
	queue     chan logLine
	start     sync.Once
	klogSetup sync.Once
	klogFlags *flag.FlagSet
	// callMu is held while the sink runs, so that SetSink can wait for a
	// call of the sink it replaces; sinkTID is the thread running it (0:
	// none), so that SetSink called from the sink does not wait for
	// itself (a thread: delivery is locked to one, and Go offers no
	// goroutine identity to compare).
	callMu  sync.Mutex
	sinkTID atomic.Int64
}

func init() { logging.level.Store(int32(LevelWarning)) } // quiet by default

// SetSink routes the library's and client-go's logs to sink (nil:
// standard error). When it returns, the sink it replaced is not running
// and will not run again (unless it is called from that sink itself).
func SetSink(sink Sink) {
	setupKlog()
	if sink == nil {
		logging.sink.Store(nil)
	} else {
		logging.sink.Store(&sink)
	}
	if logging.sinkTID.Load() != int64(syscall.Gettid()) {
		logging.callMu.Lock() // waits for the call in progress, if any
		logging.callMu.Unlock()
	}
}

// Dropped is how many lines were dropped because the queue was full.
func Dropped() int64 { return logging.dropped.Load() }

// SetLevel sets the level (0 error .. 3 debug; above 3 raises client-go's
// verbosity too).
func SetLevel(l Level) error {
	if err := validate.LogLevel(int(l), int(MaxLevel)); err != nil {
		return err
	}
	setupKlog()
	// klog's flag set is not safe for concurrent Set: one caller at a time.
	logging.levelMu.Lock()
	defer logging.levelMu.Unlock()
	logging.level.Store(int32(l))
	return logging.klogFlags.Set("v", strconv.Itoa(max(0, int(l-LevelDebug))))
}

// setupKlog sends klog's output (client-go's logs) through our sink: one
// writer per severity, so the level is known without parsing headers.
func setupKlog() {
	logging.klogSetup.Do(func() {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		for name, value := range map[string]string{"logtostderr": "false", "alsologtostderr": "false",
			"one_output": "true", "skip_headers": "true", "stderrthreshold": "FATAL", "v": "0"} {
			_ = fs.Set(name, value)
		}
		klog.SetOutputBySeverity("INFO", klogWriter(LevelInfo))
		klog.SetOutputBySeverity("WARNING", klogWriter(LevelWarning))
		klog.SetOutputBySeverity("ERROR", klogWriter(LevelError))
		klog.SetOutputBySeverity("FATAL", klogWriter(LevelError))
		logging.klogFlags = fs
	})
}

type klogWriter Level

func (w klogWriter) Write(p []byte) (int, error) {
	emit(Level(w), "client-go: "+strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Logf emits a library message at level.
func Logf(level Level, format string, args ...any) {
	if int32(level) > logging.level.Load() {
		return
	}
	emit(level, fmt.Sprintf(format, args...))
}

func emit(level Level, msg string) {
	if int32(level) > logging.level.Load() {
		return
	}
	logging.start.Do(startLogDelivery)
	select {
	case logging.queue <- logLine{level: level, msg: msg}:
	default:
		logging.dropped.Add(1)
	}
}

func startLogDelivery() {
	logging.queue = make(chan logLine, logQueueSize)
	go deliverLogs()
}

// deliverLogs hands queued lines to the sink, one at a time, on its own
// locked thread. A panicking sink loses its line, not the delivery.
func deliverLogs() {
	runtime.LockOSThread()
	logging.sinkTID.Store(int64(syscall.Gettid()))
	for line := range logging.queue {
		if line.flush != nil {
			close(line.flush)
			continue
		}
		deliver(line)
	}
}

func deliver(line logLine) {
	logging.callMu.Lock()
	defer logging.callMu.Unlock()
	defer func() { _ = recover() }()
	if sink := logging.sink.Load(); sink != nil {
		(*sink)(line.level, line.msg)
		return
	}
	fmt.Fprintf(os.Stderr, "k8s-lease %s: %s\n", [...]string{"E", "W", "I"}[min(line.level, LevelInfo)], line.msg)
}

// Flush waits until every line emitted before it was delivered (tests).
func Flush() {
	logging.start.Do(startLogDelivery)
	done := make(chan struct{})
	logging.queue <- logLine{flush: done}
	<-done
}
