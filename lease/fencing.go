package lease

import "math"

// nextToken is the fencing token for a new leadership: one more than the
// highest token this process has seen on the lease (the current record's, or
// an earlier one if the Lease was deleted and re-created), and at least 1, so
// tokens rise strictly across holders, releases and restarts.
func nextToken(current, highestSeen int64) (int64, error) {
	top := max(current, highestSeen, 0)
	if top >= math.MaxInt32 {
		return 0, errTokenExhausted
	}
	return top + 1, nil
}
