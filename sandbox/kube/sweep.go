package kube

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox/internal/lifecycle"
)

// sweep deletes every codeexec pod in the namespace that leftoverReason
// judges certainly unused, whichever replica made it, and the stale Leases
// of other replicas; it returns how many pods it deleted.
func (r *Runner) sweep(ctx context.Context, now time.Time) (int, error) {
	sel := metav1.ListOptions{LabelSelector: LabelManagedBy + "=" + ManagedBy}
	leases, err := r.c.Leases.List(ctx, sel)
	if err != nil {
		return 0, fmt.Errorf("listing codeexec's Leases: %w", err)
	}
	pods, err := r.c.Pods.List(ctx, sel)
	if err != nil {
		return 0, fmt.Errorf("listing codeexec's pods: %w", err)
	}
	alive := map[string]bool{r.replica: true}
	var errs []error
	for i := range leases.Items {
		l := &leases.Items[i]
		if l.Name == r.replica || !stale(l, now) {
			alive[l.Name] = true
		}
	}
	n := 0
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Labels[LabelManagedBy] != ManagedBy { // belt and braces: never touch others
			continue
		}
		why := leftoverReason(p, r.replica, alive, r.isLive, now)
		if why == "" {
			continue
		}
		err := r.c.Pods.Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting pod %s: %w", p.Name, err))
			continue
		}
		r.log.Info("removed a leftover pod", "pod", p.Name, "of_replica", p.Labels[LabelReplica], "role", p.Labels[LabelRole],
			"phase", p.Status.Phase, "reason", why)
		n++
	}
	// The Leases of stopped replicas go last: with them, the garbage
	// collector removes whatever pod of theirs is left.
	for i := range leases.Items {
		l := &leases.Items[i]
		if alive[l.Name] {
			continue
		}
		err := r.c.Leases.Delete(ctx, l.Name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)})
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting the Lease %s of a stopped replica: %w", l.Name, err))
			continue
		}
		r.log.Info("removed the Lease of a replica that stopped", "lease", l.Name)
	}
	return n, errors.Join(errs...)
}

// leftoverReason says why a codeexec pod is certainly unused ("" when it
// may be in use):
//   - its deadline has passed, or it has none that can be read;
//   - it belongs to this replica (self), which no longer tracks it (its
//     creation's answer was lost, or its deletion failed);
//   - its replica's Lease is gone or stale (alive lists the replicas whose
//     Lease is renewed).
func leftoverReason(p *corev1.Pod, self string, alive map[string]bool, tracked func(string) bool, now time.Time) string {
	dl, err := time.Parse(time.RFC3339, p.Annotations[AnnotationDeadline])
	replica := p.Labels[LabelReplica]
	switch {
	case err != nil:
		return "it has no deadline"
	case !now.Before(dl):
		return "its deadline has passed"
	case replica == self:
		if !tracked(p.Name) {
			return "this replica no longer uses it"
		}
	case !alive[replica]:
		return "its replica stopped (its Lease is gone or was not renewed for " + leaseDuration.String() + ")"
	}
	return ""
}

// sweepLoop sweeps every sweepEvery until Close.
func (r *Runner) sweepLoop() {
	defer close(r.sweeperDone)
	lifecycle.Every(r.done, sweepEvery, func(now time.Time) {
		ctx, cancel := context.WithTimeout(r.doneCtx, apiTimeout)
		defer cancel()
		if _, err := r.sweep(ctx, now); err != nil && ctx.Err() == nil {
			r.log.Warn("could not remove leftover pods", "err", err)
		}
	})
}
