package lease

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"k8s.io/klog/v2"
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
	maxLevel     Level = 12
)

// LogSink receives every emitted message. Calls are serialized.
type LogSink func(level Level, msg string)

var logging struct {
	mu        sync.Mutex // serializes sink calls and sink changes
	sink      LogSink    // nil: stderr
	level     atomic.Int32
	klogSetup sync.Once
	klogFlags *flag.FlagSet
}

func init() { logging.level.Store(int32(LevelWarning)) } // quiet by default

// SetLogSink routes the library's and client-go's logs to sink (nil:
// standard error).
func SetLogSink(sink LogSink) {
	setupKlog()
	logging.mu.Lock()
	logging.sink = sink
	logging.mu.Unlock()
}

// SetLogLevel sets the level (0 error .. 3 debug; above 3 raises client-go's
// verbosity too).
func SetLogLevel(l Level) error {
	if l < LevelError || l > maxLevel {
		return invalid("log level: must be 0..%d, got %d", maxLevel, l)
	}
	setupKlog()
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

// logf emits a library message at level.
func logf(level Level, format string, args ...any) {
	if int32(level) > logging.level.Load() {
		return
	}
	emit(level, fmt.Sprintf(format, args...))
}

func emit(level Level, msg string) {
	if int32(level) > logging.level.Load() {
		return
	}
	logging.mu.Lock()
	defer logging.mu.Unlock()
	if logging.sink != nil {
		logging.sink(level, msg)
		return
	}
	fmt.Fprintf(os.Stderr, "k8s-lease %s: %s\n", [...]string{"E", "W", "I"}[min(level, LevelInfo)], msg)
}
