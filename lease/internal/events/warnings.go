package events

import (
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/k8s-lease/k8s-lease/lease/kubeapi"
)

// warnings rate-limits the warnings about Events that could not be
// written: one per warnEvery; the rest go to the debug level and are
// counted in the next warning.
type warnings struct {
	mu         sync.Mutex
	last       time.Time
	suppressed int
}

// reportFailure logs that ev (nil: none in particular) could not be
// written, as a warning unless one was logged less than warnEvery ago.
func (r *Recorder) reportFailure(err error, ev *kubeapi.Event) {
	w := &r.warnings
	w.mu.Lock()
	at := r.clock.Now()
	if !w.last.IsZero() && at.Sub(w.last) < warnEvery {
		w.suppressed++
		w.mu.Unlock()
		r.log(Debug, "lease events: %v %s", err, describeEvent(ev))
		return
	}
	suppressed, since := w.suppressed, at.Sub(w.last)
	w.last, w.suppressed = at, 0
	w.mu.Unlock()
	line := fmt.Sprintf("lease events: could not record a Kubernetes Event (elections are not affected): %v %s", err, describeEvent(ev))
	if apierrors.IsForbidden(err) {
		line += fmt.Sprintf("; grant create on events (see deploy/rbac.yaml), or set %s=off", Env)
	}
	if suppressed > 0 {
		line += fmt.Sprintf(" (%d more such failures in the last %v were logged at debug level only)", suppressed, since.Round(time.Second))
	}
	r.log(Warning, "%s", line)
}

// describeEvent names an Event in a log line ("" for none).
func describeEvent(ev *kubeapi.Event) string {
	if ev == nil {
		return ""
	}
	return fmt.Sprintf("[Event %s on %s %s/%s: %q]", ev.Reason, ev.InvolvedObject.Kind,
		ev.InvolvedObject.Namespace, ev.InvolvedObject.Name, ev.Message)
}
