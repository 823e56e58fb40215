package kube

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
)

// The replica's Lease.
//
// Each Runner (a replica of codeexec) holds a Lease of its own in the runs'
// namespace, named like the replica (LabelReplica), and renews it every
// leaseRenew. Every pod it creates carries an owner reference to that
// Lease, so that the cluster's garbage collector removes the pods of a
// Lease that is deleted. A Lease not renewed for leaseDuration is stale: its
// replica stopped (crashed, was killed, lost the API server), and any
// replica's sweeper deletes its pods and the Lease itself.
const (
	leaseDuration = 60 * time.Second
	leaseRenew    = 15 * time.Second
)

// replicaLease creates and renews the replica's Lease.
type replicaLease struct {
	c    *kubeapi.Clients
	log  *slog.Logger
	name string

	mu  sync.Mutex
	uid types.UID

	stopC    chan struct{}
	stopOnce sync.Once
	done     chan struct{}
}

// holderIdentity names the process that holds the lease, for people.
func holderIdentity() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%d", host, os.Getpid())
}

// newLease creates the Lease called name and starts renewing it.
func newLease(ctx context.Context, c *kubeapi.Clients, log *slog.Logger, name string) (*replicaLease, error) {
	l, err := newLeaseObject(ctx, c, name)
	if err != nil {
		return nil, fmt.Errorf("kubernetes: %w: creating the replica's Lease %s in namespace %s: %v", sandbox.ErrSandboxUnavailable, name, c.Leases.GetNamespace(), err)
	}
	rl := &replicaLease{c: c, log: log, name: name, uid: l.UID, stopC: make(chan struct{}), done: make(chan struct{})}
	go rl.renewLoop()
	return rl, nil
}

// owner is the owner reference every pod of the replica carries.
func (rl *replicaLease) owner() metav1.OwnerReference {
	rl.mu.Lock()
	defer rl.mu.Unlock()
	return metav1.OwnerReference{APIVersion: "coordination.k8s.io/v1", Kind: "Lease", Name: rl.name, UID: rl.uid}
}

func (rl *replicaLease) renewLoop() {
	defer close(rl.done)
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	failing := false
	for {
		select {
		case <-rl.stopC:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), leaseRenew)
		err := rl.renew(ctx)
		cancel()
		switch {
		case err != nil && !failing:
			failing = true
			rl.log.Warn("could not renew the replica's Lease; after "+leaseDuration.String()+" without a renewal other replicas take this one for stopped and remove its pods", "lease", rl.name, "err", err)
		case err == nil && failing:
			failing = false
			rl.log.Info("the replica's Lease is renewed again", "lease", rl.name)
		}
	}
}

// renew sets the Lease's renew time to now. A Lease that another replica
// deleted meanwhile (it took this one for stopped) is made again: the pods
// that referred to the old one are gone with it.
func (rl *replicaLease) renew(ctx context.Context) error {
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := rl.c.Leases.Get(ctx, rl.name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &now
		_, err = rl.c.Leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if !apierrors.IsNotFound(err) {
		return err
	}
	rl.log.Error("the replica's Lease was deleted by another replica, which took this one for stopped: the pods of its runs were removed with it; making it again", "lease", rl.name)
	fresh, err := newLeaseObject(ctx, rl.c, rl.name)
	if err != nil {
		return err
	}
	rl.mu.Lock()
	rl.uid = fresh.UID
	rl.mu.Unlock()
	return nil
}

// newLeaseObject creates the Lease called name, held and renewed now.
func newLeaseObject(ctx context.Context, c *kubeapi.Clients, name string) (*coordinationv1.Lease, error) {
	now := metav1.NewMicroTime(time.Now())
	holder := holderIdentity()
	secs := int32(leaseDuration / time.Second)
	return c.Leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelManagedBy: ManagedBy, LabelReplica: name}},
		Spec: coordinationv1.LeaseSpec{
			HolderIdentity: &holder, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now,
		},
	}, metav1.CreateOptions{})
}

// stop stops renewing the Lease; it is safe to call twice.
func (rl *replicaLease) stop() {
	rl.stopOnce.Do(func() { close(rl.stopC) })
	<-rl.done
}

// close stops renewing and deletes the Lease (and with it, through the
// garbage collector, any pod of the replica that is still there).
func (rl *replicaLease) close() error {
	rl.stop()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	err := rl.c.Leases.Delete(ctx, rl.name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("kubernetes: deleting the replica's Lease %s: %w", rl.name, err)
	}
	return nil
}

// stale reports whether a Lease has not been renewed for leaseDuration (or
// its own duration, if longer) at now.
func stale(l *coordinationv1.Lease, now time.Time) bool {
	d := leaseDuration
	if s := l.Spec.LeaseDurationSeconds; s != nil && time.Duration(*s)*time.Second > d {
		d = time.Duration(*s) * time.Second
	}
	last := l.CreationTimestamp.Time
	if l.Spec.RenewTime != nil {
		last = l.Spec.RenewTime.Time
	}
	return now.Sub(last) > d
}

func ptr[T any](v T) *T { return &v }
