package logs

import (
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/k8s-lease/k8s-lease/lease/internal/validate"
)

// deliveredLines is what a sink received, each line as its level's letter
// and the message.
type deliveredLines struct {
	sync.Mutex
	lines []string
}

func (d *deliveredLines) sink(level Level, msg string) {
	d.Lock()
	defer d.Unlock()
	d.lines = append(d.lines, string("EWID"[min(level, LevelDebug)])+" "+msg)
}

func (d *deliveredLines) has(prefix string) bool {
	d.Lock()
	defer d.Unlock()
	return slices.ContainsFunc(d.lines, func(l string) bool { return strings.HasPrefix(l, prefix) })
}

func TestLoggingLevelsAndKlogRouting(t *testing.T) {
	c := &deliveredLines{}
	SetSink(c.sink)
	t.Cleanup(func() { SetSink(nil); _ = SetLevel(LevelWarning) })

	Logf(LevelInfo, "hidden at the default level")
	Logf(LevelWarning, "shown warning")
	klog.Warning("from client-go")
	klog.InfoS("client-go info hidden")
	Flush()
	if c.has("I hidden") || c.has("I client-go: client-go info") {
		t.Fatalf("info emitted at the default (warning) level: %q", c.lines)
	}
	if !c.has("W shown warning") || !c.has("W client-go: from client-go") {
		t.Fatalf("warnings missing: %q", c.lines)
	}
	if err := SetLevel(LevelInfo); err != nil {
		t.Fatal(err)
	}
	Logf(LevelInfo, "now shown")
	klog.V(1).Info("klog V(1) still hidden at info")
	Flush()
	if !c.has("I now shown") || c.has("I client-go: klog V(1)") {
		t.Fatalf("info level: %q", c.lines)
	}
	if err := SetLevel(LevelDebug + 1); err != nil {
		t.Fatal(err)
	}
	klog.V(1).Info("klog V(1) shown")
	Flush()
	if !c.has("I client-go: klog V(1) shown") {
		t.Fatalf("klog verbosity not raised: %q", c.lines)
	}
	for _, bad := range []Level{-1, MaxLevel + 1} {
		if err := SetLevel(bad); err == nil {
			t.Errorf("SetLevel(%d) accepted", bad)
		}
	}
}

// Every level from errors to the highest client-go verbosity is taken
// (klog's flag too), anything else refused naming the log level, and a
// refusal leaves the level as it was.
func TestSetLevelRange(t *testing.T) {
	before := Level(logging.level.Load())
	t.Cleanup(func() { _ = SetLevel(before) })
	for _, tc := range []struct {
		level Level
		ok    bool
	}{
		{math.MinInt32, false}, {-1, false}, {LevelError, true}, {LevelDebug, true}, {MaxLevel, true}, {MaxLevel + 1, false}, {math.MaxInt32, false},
	} {
		t.Run(strconv.Itoa(int(tc.level)), func(t *testing.T) {
			_ = SetLevel(LevelWarning)
			err := SetLevel(tc.level)
			if (err == nil) != tc.ok {
				t.Fatalf("SetLevel(%d) = %v, want ok=%v", tc.level, err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, validate.ErrInvalidArgument) || !strings.Contains(err.Error(), "log level") {
					t.Fatalf("refusal %q: not ErrInvalidArgument naming the log level", err)
				}
				if l := Level(logging.level.Load()); l != LevelWarning {
					t.Fatalf("a refused level changed the level to %d", l)
				}
			}
		})
	}
}

// A sink may set the level and replace itself: SetSink called from the
// sink does not wait for the call it is made from.
func TestSinkMaySetTheSinkAndLevel(t *testing.T) {
	t.Cleanup(func() { SetSink(nil); _ = SetLevel(LevelWarning) })
	called := make(chan struct{})
	SetSink(func(Level, string) {
		_ = SetLevel(LevelWarning)
		SetSink(nil)
		close(called)
	})
	Logf(LevelError, "to the sink that replaces itself")
	select {
	case <-called:
	case <-time.After(10 * time.Second):
		t.Fatal("the sink hung calling SetLevel and SetSink")
	}
	Flush()
}

// SetLevel may be called from several threads at once (a host thread
// and a log callback, say): klog's flag set is not safe for that by itself.
func TestSetLevelConcurrently(t *testing.T) {
	t.Cleanup(func() { _ = SetLevel(LevelWarning) })
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			for j := 0; j < 50; j++ {
				if err := SetLevel(Level(j % int(MaxLevel+1))); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}
