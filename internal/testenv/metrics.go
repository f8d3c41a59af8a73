package testenv

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// APIRequests sums the API server's apiserver_request_total for resource,
// counting only answers with code when it is not "" (e.g. "409"). Figures
// are the server's own, whatever client sent the requests.
func APIRequests(admin kubernetes.Interface, resource, code string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, fmt.Errorf("read the API server's metrics: %w", err)
	}
	var total float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="`+resource+`"`) ||
			(code != "" && !strings.Contains(line, `code="`+code+`"`)) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			return 0, fmt.Errorf("metrics line %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}
