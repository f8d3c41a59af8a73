package lease

import (
	"strings"
	"sync"
	"testing"

	"k8s.io/klog/v2"
)

type capturedLogs struct {
	mu   sync.Mutex
	msgs []string
}

func (c *capturedLogs) sink(level Level, msg string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs = append(c.msgs, string("EWID"[min(level, LevelDebug)])+" "+msg)
}

func (c *capturedLogs) has(prefix string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs {
		if strings.HasPrefix(m, prefix) {
			return true
		}
	}
	return false
}

func TestLoggingLevelsAndKlogRouting(t *testing.T) {
	c := &capturedLogs{}
	SetLogSink(c.sink)
	t.Cleanup(func() { SetLogSink(nil); _ = SetLogLevel(LevelWarning) })

	logf(LevelInfo, "hidden at the default level")
	logf(LevelWarning, "shown warning")
	klog.Warning("from client-go")
	klog.InfoS("client-go info hidden")
	if c.has("I hidden") || c.has("I client-go: client-go info") {
		t.Fatalf("info emitted at the default (warning) level: %q", c.msgs)
	}
	if !c.has("W shown warning") || !c.has("W client-go: from client-go") {
		t.Fatalf("warnings missing: %q", c.msgs)
	}
	if err := SetLogLevel(LevelInfo); err != nil {
		t.Fatal(err)
	}
	logf(LevelInfo, "now shown")
	klog.V(1).Info("klog V(1) still hidden at info")
	if !c.has("I now shown") || c.has("I client-go: klog V(1)") {
		t.Fatalf("info level: %q", c.msgs)
	}
	if err := SetLogLevel(LevelDebug + 1); err != nil {
		t.Fatal(err)
	}
	klog.V(1).Info("klog V(1) shown")
	if !c.has("I client-go: klog V(1) shown") {
		t.Fatalf("klog verbosity not raised: %q", c.msgs)
	}
	for _, bad := range []Level{-1, maxLevel + 1} {
		if err := SetLogLevel(bad); err == nil {
			t.Errorf("SetLogLevel(%d) accepted", bad)
		}
	}
}
