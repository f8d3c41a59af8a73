package lease

import (
	"errors"
	"os"
	"strings"
	"testing"
)

// docs/operations.md lists every Event a term's start and end records, in
// the words the code writes (placeholders <id>, <target>, <error>, N).
func TestTheEventsOfOperationsMdAreTheOnesRecorded(t *testing.T) {
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	placeholder := func(msg string) string { return strings.ReplaceAll(msg, "(fencing token -1)", "(fencing token N)") }
	_, elected := electedEvent("<id>", -1)
	_, released := stoppedEvent("<id>", -1, nil, nil)
	_, failedRelease := stoppedEvent("<id>", -1, nil, errors.New("<error>"))
	_, handedOff := handOffEvent("<id>", "<target>", -1, nil)
	_, failedHandOff := handOffEvent("<id>", "<target>", -1, errors.New("<error>"))
	for _, msg := range []string{
		placeholder(elected),
		placeholder(released),
		placeholder(failedRelease),
		placeholder(handedOff),
		placeholder(failedHandOff),
		"<id> stopped leading: " + ErrRenewDeadline.Error(),
		"<id> stopped leading: " + ErrLeaseTaken.Error(),
		ErrLeaseDeleted.Error(),
		ErrLeaseEdited.Error(),
	} {
		if !strings.Contains(string(doc), msg) {
			t.Errorf("docs/operations.md does not list the Event %q", msg)
		}
	}
}
