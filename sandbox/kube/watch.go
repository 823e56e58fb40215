package kube

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/codeexec/codeexec/sandbox/kube/internal/kubeapi"
)

// podWatch follows the pods of one replica (its LabelReplica) through an
// informer, and tells whoever waits on a pod when it changes: nothing in
// kubernetes mode polls the API server.
type podWatch struct {
	cancel context.CancelFunc
	done   chan struct{}
	ctl    cache.Controller

	mu   sync.Mutex
	pods map[string][]*podState // by pod name, while someone follows it
}

// podState is what is known of one pod, as events arrive.
type podState struct {
	mu      sync.Mutex
	pod     *corev1.Pod   // the last version seen (nil before the first)
	gone    bool          // the pod was deleted
	changed chan struct{} // closed and replaced on every change
}

// startWatch starts the informer over the pods that carry selector and
// waits, within ctx, until it has listed them.
func startWatch(ctx context.Context, c *kubeapi.Clients, selector string) (*podWatch, error) {
	w := &podWatch{pods: map[string][]*podState{}, done: make(chan struct{})}
	lw := cache.NewFilteredListWatchFromClient(c.Core, "pods", c.Pods.GetNamespace(), func(o *metav1.ListOptions) {
		o.LabelSelector = selector
	})
	_, ctl := cache.NewInformerWithOptions(cache.InformerOptions{
		ListerWatcher: lw,
		ObjectType:    &corev1.Pod{},
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { w.update(obj, false) },
			UpdateFunc: func(_, obj any) { w.update(obj, false) },
			DeleteFunc: func(obj any) {
				if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
					obj = d.Obj
				}
				w.update(obj, true)
			},
		},
	})
	w.ctl = ctl
	runCtx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go func() {
		defer close(w.done)
		ctl.RunWithContext(runCtx)
	}()
	if !cache.WaitForCacheSync(ctx.Done(), ctl.HasSynced) {
		w.stop()
		return nil, fmt.Errorf("the watch of pods in namespace %s did not start: %w", c.Pods.GetNamespace(), context.Cause(ctx))
	}
	return w, nil
}

// stop ends the informer and waits for it.
func (w *podWatch) stop() {
	w.cancel()
	<-w.done
}

func (w *podWatch) update(obj any, deleted bool) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	w.mu.Lock()
	sts := slices.Clone(w.pods[pod.Name])
	w.mu.Unlock()
	for _, st := range sts {
		st.set(pod, deleted)
	}
}

func (st *podState) set(pod *corev1.Pod, deleted bool) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.gone {
		return
	}
	st.pod = pod
	st.gone = deleted
	close(st.changed)
	st.changed = make(chan struct{})
}

// follow starts following the pod called name; call it before the pod is
// created (or before asking whether it still exists), so that no event is
// missed. forget ends it.
func (w *podWatch) follow(name string) *podState {
	st := &podState{changed: make(chan struct{})}
	w.mu.Lock()
	w.pods[name] = append(w.pods[name], st)
	w.mu.Unlock()
	return st
}

func (w *podWatch) forget(name string, st *podState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pods[name] = slices.DeleteFunc(w.pods[name], func(s *podState) bool { return s == st })
	if len(w.pods[name]) == 0 {
		delete(w.pods, name)
	}
}

// now returns the last version of the pod seen, whether it was deleted,
// and a channel closed at the next change.
func (st *podState) now() (*corev1.Pod, bool, <-chan struct{}) {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.pod, st.gone, st.changed
}

// errGone: the pod was deleted.
var errGone = fmt.Errorf("the pod was deleted")

// wait waits until cond says the pod is where it should be (true), or
// fails (an error), within d and ctx. cond sees every version of the pod
// (nil before the first event) and whether it was deleted. On a timeout the
// error is what describe says of the last version seen.
func (st *podState) wait(ctx context.Context, d time.Duration, cond func(pod *corev1.Pod, gone bool) (bool, error), describe func(*corev1.Pod) string) error {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		pod, gone, changed := st.now()
		if ok, err := cond(pod, gone); ok || err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return fmt.Errorf("gave up after %s: %s", d, describe(pod))
		}
	}
}

// runContainer returns the status of the run container, if the pod has one.
func runContainer(pod *corev1.Pod) *corev1.ContainerStatus {
	if pod == nil {
		return nil
	}
	for i := range pod.Status.ContainerStatuses {
		if pod.Status.ContainerStatuses[i].Name == containerName {
			return &pod.Status.ContainerStatuses[i]
		}
	}
	return nil
}

// terminated returns the run container's terminated state, if it ended.
func terminated(pod *corev1.Pod) *corev1.ContainerStateTerminated {
	if cs := runContainer(pod); cs != nil {
		return cs.State.Terminated
	}
	return nil
}

// startFailures are the reasons a container waits with that will not pass
// by themselves.
var startFailures = map[string]bool{
	"ErrImageNeverPull":          true,
	"ErrImagePull":               true,
	"ImagePullBackOff":           true,
	"InvalidImageName":           true,
	"CreateContainerConfigError": true,
	"CreateContainerError":       true,
	"RunContainerError":          true,
	"CrashLoopBackOff":           true,
}

// running is the condition of a pod whose run container has started: an
// error when it cannot get there (deleted, ended, a start failure that will
// not pass).
func running(pod *corev1.Pod, gone bool) (bool, error) {
	if gone {
		return false, errGone
	}
	if pod == nil {
		return false, nil
	}
	cs := runContainer(pod)
	switch {
	case cs != nil && cs.State.Running != nil:
		return true, nil
	case cs != nil && cs.State.Terminated != nil:
		t := cs.State.Terminated
		return false, fmt.Errorf("its container ended before it could be attached to (%s, exit status %d%s)", t.Reason, t.ExitCode, colonMessage(t.Message))
	case cs != nil && cs.State.Waiting != nil && startFailures[cs.State.Waiting.Reason]:
		return false, fmt.Errorf("its container cannot start: %s%s", cs.State.Waiting.Reason, colonMessage(cs.State.Waiting.Message))
	case pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded:
		return false, fmt.Errorf("it ended before its container ran (phase %s%s)", pod.Status.Phase, colonMessage(pod.Status.Message))
	}
	return false, nil
}

// describePending says why a pod is not running yet, for a timeout.
func describePending(pod *corev1.Pod) string {
	if pod == nil {
		return "no event about the pod arrived"
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
			return fmt.Sprintf("the pod is not scheduled (%s%s)", c.Reason, colonMessage(c.Message))
		}
	}
	if cs := runContainer(pod); cs != nil && cs.State.Waiting != nil {
		return fmt.Sprintf("its container is waiting (%s%s)", cs.State.Waiting.Reason, colonMessage(cs.State.Waiting.Message))
	}
	return fmt.Sprintf("the pod is %s", pod.Status.Phase)
}

func colonMessage(m string) string {
	if m == "" {
		return ""
	}
	return ": " + m
}
