package main

import (
	"context"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/k8s-lease/k8s-lease/internal/testenv"
)

// singleBedName and haBedName name the two beds in the ha section's rows.
const (
	singleBedName = "1 API server"
	haBedName     = "3 etcd members, 2 API servers behind a load balancer"
)

// haRows measures the graceful hand-off and the crash fail-over at 5/4/1 s
// with one standby on an HA bed of its own (envtest-server -etcd-members 3
// -apiservers 2) beside the same rows on b's bed, the two beds and the two
// implementations alternating, so that what the second API server and the
// load balancer cost shows within one run.
func (b *bench) haRows(n, nFail int) error {
	srv, err := testenv.Start(nil, "--namespace", benchNamespace, "-etcd-members", "3", "-apiservers", "2")
	if err != nil {
		return fmt.Errorf("the HA bed: %w", err)
	}
	defer func() { _ = srv.Stop(60 * time.Second) }()
	admin, err := kubernetes.NewForConfig(srv.Config)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	renews, err := watchRenewals(ctx, admin)
	if err != nil {
		return fmt.Errorf("the HA bed: %w", err)
	}
	ha := &bench{cfg: srv.Config, admin: admin, renews: renews}
	beds := []struct {
		name string
		b    *bench
	}{{singleBedName, b}, {haBedName, ha}}
	defer func() { b.failures = append(b.failures, ha.failures...) }()
	for _, row := range []struct {
		n       int
		what    string // the row's name, before ": <bed>"
		measure func(b *bench, w impl) (time.Duration, error)
	}{
		{n, fmt.Sprintf("graceful hand-off, %s, 1 standby", timingName(fast)),
			func(b *bench, w impl) (time.Duration, error) { return b.handoff(w, fast, 1) }},
		{nFail, fmt.Sprintf("crash fail-over overshoot past renewTime + lease, %s", timingName(fast)),
			func(b *bench, w impl) (time.Duration, error) { return b.failover(w, fast, 1) }},
	} {
		for i := 0; i < row.n; i++ {
			for _, bed := range beds {
				for _, w := range []impl{ours, clientGo} {
					d, err := row.measure(bed.b, w)
					if err != nil {
						return fmt.Errorf("%s on %s: %w", row.what, bed.name, err)
					}
					b.add(row.what+": "+bed.name, w, "ms", ms(d))
				}
			}
		}
	}
	return nil
}
