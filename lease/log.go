package lease

import "github.com/k8s-lease/k8s-lease/lease/internal/logs"

// Level is a log level: lower is more severe. A message is emitted when its
// level is <= the configured level.
type Level = logs.Level

// Log levels. Debug+n enables client-go's (klog) verbosity n+1.
const (
	LevelError   = logs.LevelError
	LevelWarning = logs.LevelWarning
	LevelInfo    = logs.LevelInfo
	LevelDebug   = logs.LevelDebug
)

// LogSink receives every emitted message. Calls are serialized, on a
// goroutine of the library's own (never under a library lock, never on the
// caller's or the renewal path), so a sink may call any function of the
// library, and a slow one delays only the lines behind it.
type LogSink = logs.Sink

// SetLogSink routes the library's and client-go's logs to sink (nil:
// standard error). When it returns, the sink it replaced is not running
// and will not run again (unless it is called from that sink itself).
func SetLogSink(sink LogSink) { logs.SetSink(sink) }

// SetLogLevel sets the level (0 error .. 3 debug; above 3 raises client-go's
// verbosity too, up to 12).
func SetLogLevel(l Level) error { return logs.SetLevel(l) }

// LogsDropped is how many lines were dropped because the queue was full.
func LogsDropped() int64 { return logs.Dropped() }

// logf emits a library message at level.
func logf(level Level, format string, args ...any) { logs.Logf(level, format, args...) }
