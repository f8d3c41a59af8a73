package validate

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// Seconds refuses what it cannot convert exactly: a negative value large
// enough to wrap around when multiplied by 1000 came back as a valid
// duration (-18446744073709541 s became 10.616 s).
func TestSecondsRefusesWhatWrapsAround(t *testing.T) {
	for _, tc := range []struct {
		name          string
		lease, renew  int
		retry         int
		wantInMessage string
	}{
		{"renew deadline wraps to 10.616 s", 15, -18446744073709541, 2, "renew deadline"},
		{"lease duration, the most negative int", math.MinInt, 10, 2, "lease duration"},
		{"retry period just below the range", 15, 10, math.MinInt64/1000 - 1, "retry period"},
		{"too large", 15, 10, math.MaxInt64/1000 + 1, "retry period"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, r, p, err := Seconds(tc.lease, tc.renew, tc.retry)
			if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.wantInMessage) {
				t.Fatalf("Seconds(%d, %d, %d) = %v, %v, %v, %v; want a refusal naming the %s",
					tc.lease, tc.renew, tc.retry, l, r, p, err, tc.wantInMessage)
			}
		})
	}
}
