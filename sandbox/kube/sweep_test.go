package kube

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/codeexec/codeexec/sandbox/kube/kubetest"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
)

// TestSweepRemovesLeftovers puts on the cluster a pod of a replica whose
// Lease was last renewed ten minutes ago, a pod past its deadline and a
// pod of a live replica: a sweep deletes the first two and the stale
// Lease, and leaves the live replica's pod alone.
func TestSweepRemovesLeftovers(t *testing.T) {
	r := newRunner(t, Config{Languages: []string{"bash"}})
	other := newRunner(t, Config{Languages: []string{"bash"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dead := "codeexec-" + newReplicaID()
	l, err := newLeaseObject(ctx, r.c, dead)
	if err != nil {
		t.Fatal(err)
	}
	old := metav1.NewMicroTime(time.Now().Add(-10 * time.Minute))
	l.Spec.RenewTime = &old
	if l, err = r.c.Leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.c.Leases.Delete(context.Background(), dead, metav1.DeleteOptions{}) })
	deadOwner := metav1.OwnerReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Name: dead, UID: l.UID}

	mk := func(replica string, owner metav1.OwnerReference, deadline time.Time) string {
		t.Helper()
		name := newPodName("sweep-test")
		p := r.podObject(name, podSpec{role: roleRun, cmd: []string{"sleep", "600"}, limits: containerLimits(kubetest.Limits(sandboxtest.DefaultLimits())), deadline: time.Now().Add(10 * time.Minute)})
		p.Labels[LabelReplica] = replica
		p.OwnerReferences = []metav1.OwnerReference{owner}
		p.Annotations[AnnotationDeadline] = deadline.UTC().Format(time.RFC3339)
		if _, err := r.c.Pods.Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = r.c.Pods.Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
		})
		return name
	}
	ofDead := mk(dead, deadOwner, time.Now().Add(time.Hour))
	expired := mk(other.replica, other.lease.owner(), time.Now().Add(-time.Minute))
	live := mk(other.replica, other.lease.owner(), time.Now().Add(time.Hour))

	n, err := r.sweep(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Errorf("the sweep deleted %d pods, want 2", n)
	}
	for _, name := range []string{ofDead, expired} {
		if _, err := r.c.Pods.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("pod %s is still there after the sweep (%v)", name, err)
		}
	}
	if _, err := r.c.Pods.Get(ctx, live, metav1.GetOptions{}); err != nil {
		t.Errorf("the sweep deleted pod %s of a live replica: %v", live, err)
	}
	if _, err := r.c.Leases.Get(ctx, dead, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the stale Lease %s is still there after the sweep (%v)", dead, err)
	}
}

// TestLeaseRenewedAndOwnsPods checks that the replica's Lease is renewed and
// that a run's pod is owned by it.
func TestLeaseRenewedAndOwnsPods(t *testing.T) {
	r := newRunner(t, Config{Languages: []string{"bash"}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before, err := r.c.Leases.Get(ctx, r.replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.lease.renew(ctx); err != nil {
		t.Fatal(err)
	}
	after, err := r.c.Leases.Get(ctx, r.replica, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !after.Spec.RenewTime.After(before.Spec.RenewTime.Time) || stale(after, time.Now()) || !stale(after, time.Now().Add(2*leaseDuration)) {
		t.Errorf("renew time %v then %v", before.Spec.RenewTime, after.Spec.RenewTime)
	}
	if o := r.lease.owner(); o.UID != after.UID || o.Name != r.replica {
		t.Errorf("owner %+v, lease %s %s", o, after.Name, after.UID)
	}
}
