package tasks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/codeexec/codeexec/server/tasks"
)

func newStore(t *testing.T, cfg tasks.Config) *tasks.Memory {
	t.Helper()
	m := tasks.NewMemory(cfg)
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func wait(t *testing.T, s tasks.Store, owner, id string) tasks.Task {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	task, err := s.Wait(ctx, owner, id)
	if err != nil {
		t.Fatalf("Wait(%s): %v", id, err)
	}
	return task
}

func TestCompletesWithItsResult(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, tasks.Config{KeepResult: time.Minute, MaxRunTime: time.Hour, PollInterval: 2 * time.Second})
		release := make(chan struct{})
		task, err := s.Create("alice", 0, 0, func(ctx context.Context, in tasks.Input) (any, error) {
			<-release
			return "the result", nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if task.Status != tasks.StatusWorking || len(task.ID) != 32 || task.PollInterval != 2*time.Second {
			t.Errorf("new task = %+v, want working, a 32-hex-digit id, poll interval 2s", task)
		}
		if task.TTL != time.Hour+time.Minute {
			t.Errorf("TTL of a working task = %v, want the maximum run time plus the keep time", task.TTL)
		}
		got, err := s.Get("alice", task.ID)
		if err != nil || got.Status != tasks.StatusWorking {
			t.Errorf("Get while working = %+v, %v", got, err)
		}
		time.Sleep(5 * time.Second) // the work's own time, on the bubble's clock
		close(release)
		done := wait(t, s, "alice", task.ID)
		if done.Status != tasks.StatusCompleted || done.Result != "the result" || done.Err != nil {
			t.Errorf("ended task = %+v, want completed with the result", done)
		}
		if done.TTL != 5*time.Second+time.Minute {
			t.Errorf("TTL of an ended task = %v, want its age (5s) plus the one-minute keep time", done.TTL)
		}
	})
}

func TestOwnerScopesTasks(t *testing.T) {
	t.Parallel()
	s := newStore(t, tasks.Config{})
	task, err := s.Create("alice", 0, 0, func(ctx context.Context, in tasks.Input) (any, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get("mallory", task.ID); !errors.Is(err, tasks.ErrNotFound) {
		t.Errorf("Get by another owner: %v, want ErrNotFound", err)
	}
	if _, err := s.Cancel("mallory", task.ID); !errors.Is(err, tasks.ErrNotFound) {
		t.Errorf("Cancel by another owner: %v, want ErrNotFound", err)
	}
	if err := s.Update("mallory", task.ID, nil); !errors.Is(err, tasks.ErrNotFound) {
		t.Errorf("Update by another owner: %v, want ErrNotFound", err)
	}
	if _, err := s.Get("alice", "nope"); !errors.Is(err, tasks.ErrNotFound) {
		t.Errorf("Get of an unknown id: %v, want ErrNotFound", err)
	}
}

func TestFailure(t *testing.T) {
	t.Parallel()
	s := newStore(t, tasks.Config{})
	boom := errors.New("boom")
	tests := []struct {
		name string
		fn   tasks.Func
		want string
	}{
		{"error", func(context.Context, tasks.Input) (any, error) { return nil, boom }, "boom"},
		{"panic", func(context.Context, tasks.Input) (any, error) { panic("oh no") }, "task panicked: oh no"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			task, err := s.Create("", 0, 0, tt.fn)
			if err != nil {
				t.Fatal(err)
			}
			done := wait(t, s, "", task.ID)
			if done.Status != tasks.StatusFailed || done.Err == nil || done.Err.Error() != tt.want || done.StatusMessage != tt.want {
				t.Errorf("task = %+v, want failed with %q", done, tt.want)
			}
		})
	}
}

// TestCancelStopsTheWorkFirst: Cancel returns once the work has returned,
// so that whatever the work cleans up is gone by then.
func TestCancelStopsTheWorkFirst(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, tasks.Config{})
		cleanedUp := false
		task, err := s.Create("bob", 0, 0, func(ctx context.Context, in tasks.Input) (any, error) {
			<-ctx.Done()
			time.Sleep(50 * time.Millisecond) // kill and remove the run (the bubble's clock)
			cleanedUp = true
			return nil, ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		got, err := s.Cancel("bob", task.ID)
		if err != nil {
			t.Fatal(err)
		}
		if !cleanedUp {
			t.Error("Cancel returned before the work had cleaned up")
		}
		if got.Status != tasks.StatusCancelled {
			t.Errorf("cancelled task = %+v, want cancelled", got)
		}
		if done := wait(t, s, "bob", task.ID); done.Status != tasks.StatusCancelled {
			t.Errorf("after the work returned: %+v, want still cancelled (not failed)", done)
		}
		if _, err := s.Cancel("bob", task.ID); !errors.Is(err, tasks.ErrTerminal) {
			t.Errorf("second Cancel: %v, want ErrTerminal", err)
		}
	})
}

func TestMaxRunTime(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, tasks.Config{MaxRunTime: 50 * time.Millisecond})
		start := time.Now()
		task, err := s.Create("", 0, 0, func(ctx context.Context, in tasks.Input) (any, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		})
		if err != nil {
			t.Fatal(err)
		}
		done := wait(t, s, "", task.ID)
		if done.Status != tasks.StatusFailed || !errors.Is(done.Err, tasks.ErrMaxRunTime) {
			t.Errorf("task = %+v, want failed with ErrMaxRunTime", done)
		}
		if took := time.Since(start); took != 50*time.Millisecond {
			t.Errorf("the work was stopped %v after the start, want at its 50ms maximum run time", took)
		}
	})
}

func TestResultsExpire(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, tasks.Config{KeepResult: time.Hour})
		// The client asks for 50ms, less than the store's hour: granted.
		task, err := s.Create("", 50*time.Millisecond, 0, func(context.Context, tasks.Input) (any, error) { return 1, nil })
		if err != nil {
			t.Fatal(err)
		}
		wait(t, s, "", task.ID)
		time.Sleep(50*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		if _, err := s.Get("", task.ID); err != nil {
			t.Fatalf("the task is gone before its 50ms keep time: %v", err)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if _, err := s.Get("", task.ID); !errors.Is(err, tasks.ErrNotFound) {
			t.Fatalf("the task is still held after its 50ms keep time: %v", err)
		}
		if c := s.Counts(); len(c) != 0 {
			t.Errorf("Counts = %v after expiry, want none", c)
		}
	})
}

// TestCaps: one client's tasks that have not ended, and the bytes they
// hold, are capped per client and in all; what a task held is given back
// when its work returns, cancelled or not; a full store drops the oldest
// ended task of the client that holds the most, and refuses only when no
// task has ended.
func TestCaps(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, tasks.Config{MaxTasks: 6, MaxClientTasks: 3, MaxBytes: 1000, MaxClientBytes: 600})
		release := make(chan struct{})
		block := func(ctx context.Context, in tasks.Input) (any, error) {
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		refused := func(owner string, bytes int64, cap tasks.Cap) {
			t.Helper()
			_, err := s.Create(owner, 0, bytes, block)
			var le *tasks.LimitError
			if !errors.As(err, &le) || le.Cap != cap || !errors.Is(err, tasks.ErrTooMany) {
				t.Fatalf("Create(%s, %d bytes) = %v, want refused by the %s cap", owner, bytes, err, cap)
			}
		}
		create := func(owner string, bytes int64) tasks.Task {
			t.Helper()
			task, err := s.Create(owner, 0, bytes, block)
			if err != nil {
				t.Fatalf("Create(%s, %d bytes): %v", owner, bytes, err)
			}
			return task
		}
		a1, a2 := create("alice", 100), create("alice", 400)
		refused("alice", 101, tasks.CapClientBytes)
		a3 := create("alice", 100)
		refused("alice", 0, tasks.CapClientTasks)
		// Another client is not held back by alice's caps, only by the
		// server's bytes.
		create("bob", 300)
		refused("bob", 101, tasks.CapBytes)
		// A cancelled task gives back what it held once its work has returned.
		if _, err := s.Cancel("alice", a3.ID); err != nil {
			t.Fatal(err)
		}
		create("alice", 100)
		time.Sleep(time.Second) // a3 ended first, on the bubble's clock
		// Alice's tasks end; bob's keeps working. The store (6) is then full
		// with alice's 4 ended ones and bob's 2: the next task drops alice's
		// oldest ended one.
		close(release)
		for _, id := range []string{a1.ID, a2.ID} {
			wait(t, s, "alice", id)
		}
		create("bob", 100)
		synctest.Wait() // bob's tasks are released too: every work has returned
		if c := s.Counts(); c[tasks.StatusCompleted]+c[tasks.StatusCancelled] != 6 {
			t.Fatalf("counts %v, want 6 ended tasks", c)
		}
		create("carol", 10)
		if _, err := s.Get("alice", a3.ID); !errors.Is(err, tasks.ErrNotFound) {
			t.Errorf("alice's task that ended first (cancelled) is still held (%v): the full store should have dropped it", err)
		}
		for _, id := range []string{a1.ID, a2.ID} {
			if _, err := s.Get("alice", id); err != nil {
				t.Errorf("alice's task %s: %v, want it kept", id, err)
			}
		}

		// A store full of tasks that still work refuses.
		full := newStore(t, tasks.Config{MaxTasks: 2})
		never := func(ctx context.Context, in tasks.Input) (any, error) { <-ctx.Done(); return nil, ctx.Err() }
		for _, owner := range []string{"x", "y"} {
			if _, err := full.Create(owner, 0, 0, never); err != nil {
				t.Fatal(err)
			}
		}
		var le *tasks.LimitError
		if _, err := full.Create("z", 0, 0, never); !errors.As(err, &le) || le.Cap != tasks.CapTasks {
			t.Errorf("third Create in a store of 2 working tasks: %v, want refused by the tasks cap", err)
		}
	})
}

func TestInputRequired(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, tasks.Config{})
		asked := make(chan struct{})
		task, err := s.Create("", 0, 0, func(ctx context.Context, in tasks.Input) (any, error) {
			close(asked)
			answers, err := in.Ask(ctx, map[string]any{"approval": "may I?", "name": "who?"})
			if err != nil {
				return nil, err
			}
			if _, err := in.Ask(ctx, map[string]any{"approval": "again?"}); err == nil {
				return nil, errors.New("a key was asked twice")
			}
			return fmt.Sprintf("%s %s", answers["approval"], answers["name"]), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		<-asked
		synctest.Wait() // the work waits for its answers
		got, _ := s.Get("", task.ID)
		if got.Status != tasks.StatusInputRequired || got.InputRequests["approval"] != "may I?" || len(got.InputRequests) != 2 {
			t.Fatalf("task = %+v, want input_required with both requests", got)
		}
		// A partial answer, and answers to unknown keys, leave it waiting.
		if err := s.Update("", task.ID, map[string]json.RawMessage{"approval": json.RawMessage(`"yes"`), "bogus": json.RawMessage(`1`)}); err != nil {
			t.Fatal(err)
		}
		if got, _ := s.Get("", task.ID); got.Status != tasks.StatusInputRequired {
			t.Errorf("after a partial answer: %s, want input_required", got.Status)
		}
		// A second answer to the same key does not replace the first.
		if err := s.Update("", task.ID, map[string]json.RawMessage{"approval": json.RawMessage(`"no"`), "name": json.RawMessage(`"Ada"`)}); err != nil {
			t.Fatal(err)
		}
		done := wait(t, s, "", task.ID)
		if done.Status != tasks.StatusCompleted || done.Result != `"yes" "Ada"` || done.InputRequests != nil {
			t.Errorf("task = %+v, want completed with the first answers", done)
		}
		if err := s.Update("", task.ID, nil); !errors.Is(err, tasks.ErrTerminal) {
			t.Errorf("Update after the end: %v, want ErrTerminal", err)
		}
	})
}

func TestCancelWhileAsking(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		s := newStore(t, tasks.Config{})
		errc := make(chan error, 1)
		task, err := s.Create("", 0, 0, func(ctx context.Context, in tasks.Input) (any, error) {
			_, err := in.Ask(ctx, map[string]any{"approval": "?"})
			errc <- err
			return nil, err
		})
		if err != nil {
			t.Fatal(err)
		}
		synctest.Wait() // the work waits for its answer
		if got, _ := s.Get("", task.ID); got.Status != tasks.StatusInputRequired {
			t.Fatalf("task = %+v, want input_required", got)
		}
		if _, err := s.Cancel("", task.ID); err != nil {
			t.Fatal(err)
		}
		if err := <-errc; err == nil {
			t.Error("Ask returned no error when the task was cancelled")
		}
	})
}

func TestCloseCancelsEverything(t *testing.T) {
	t.Parallel()
	var calls []map[tasks.Status]int
	var mu sync.Mutex
	s := tasks.NewMemory(tasks.Config{OnChange: func(c map[tasks.Status]int) {
		mu.Lock()
		calls = append(calls, c)
		mu.Unlock()
	}})
	stopped := make(chan struct{})
	task, err := s.Create("", 0, 0, func(ctx context.Context, in tasks.Input) (any, error) {
		<-ctx.Done()
		close(stopped)
		return nil, ctx.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	default:
		t.Error("Close returned before the work stopped")
	}
	if got, _ := s.Get("", task.ID); got.Status != tasks.StatusCancelled {
		t.Errorf("after Close: %+v, want cancelled", got)
	}
	if _, err := s.Create("", 0, 0, nil); !errors.Is(err, tasks.ErrClosed) {
		t.Errorf("Create after Close: %v, want ErrClosed", err)
	}
	_ = s.Close()
	mu.Lock()
	defer mu.Unlock()
	if len(calls) == 0 || calls[0][tasks.StatusWorking] != 1 {
		t.Errorf("OnChange calls = %v, want the first with one working task", calls)
	}
}
