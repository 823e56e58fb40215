package docker

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
)

func TestOwnerLabelRoundTrip(t *testing.T) {
	cases := []struct {
		label string
		want  owner
		ok    bool
	}{
		{"box:0b1c-77:4026531836/1234/98765", owner{"box:0b1c-77:4026531836", 1234, 98765}, true},
		{"a/b:c/1/2", owner{"a/b:c", 1, 2}, true}, // the host part is kept whole
		{"", owner{}, false},
		{"host/12", owner{}, false},
		{"/12/34", owner{}, false},
		{"host/x/34", owner{}, false},
		{"host/0/34", owner{}, false},
		{"host/12/-1", owner{}, false},
	}
	for _, c := range cases {
		got, ok := parseOwner(c.label)
		if ok != c.ok || got != c.want {
			t.Errorf("parseOwner(%q) = %+v, %v; want %+v, %v", c.label, got, ok, c.want, c.ok)
		}
		if ok && got.String() != c.label {
			t.Errorf("owner %+v prints as %q, want %q", got, got.String(), c.label)
		}
	}
}

func TestIsLeftoverOwner(t *testing.T) {
	now := time.Now()
	future := fmt.Sprint(now.Add(time.Hour).Unix())
	past := fmt.Sprint(now.Add(-time.Minute).Unix())
	const here = "box:boot:4026531836"
	// pid 100 started at tick 5 runs; every other pid (or start) is gone.
	own := owners{host: here, gone: func(pid int, start uint64) bool { return pid != 100 || start != 5 }}
	labels := func(role, deadline, ownerLabel string) map[string]string {
		l := map[string]string{LabelManaged: "true", LabelRole: role, LabelDeadline: deadline, LabelInstance: "other"}
		if ownerLabel != "" {
			l[LabelOwner] = ownerLabel
		}
		return l
	}
	cases := []struct {
		name    string
		labels  map[string]string
		state   container.ContainerState
		own     owners
		removed bool
	}{
		{"live owner, running run", labels(roleRun, future, here+"/100/5"), container.StateRunning, own, false},
		{"live owner, running warm", labels(rolePool, future, here+"/100/5"), container.StateRunning, own, false},
		{"live owner, past its deadline", labels(roleRun, past, here+"/100/5"), container.StateRunning, own, true},
		{"live owner, stopped warm of another runner", labels(rolePool, future, here+"/100/5"), container.StateExited, own, true},
		{"dead owner, running run", labels(roleRun, future, here+"/101/5"), container.StateRunning, own, true},
		{"dead owner, created run", labels(roleRun, future, here+"/101/5"), container.StateCreated, own, true},
		{"dead owner, running warm", labels(rolePool, future, here+"/101/5"), container.StateRunning, own, true},
		{"pid reused by another process", labels(roleRun, future, here+"/100/6"), container.StateRunning, own, true},
		{"owner on another host identity", labels(roleRun, future, "other:boot:4026531836/101/5"), container.StateRunning, own, false},
		{"owner in another pid namespace", labels(roleRun, future, "box:boot:4026532000/101/5"), container.StateRunning, own, false},
		{"owner on another host, past its deadline", labels(roleRun, past, "other:boot:1/101/5"), container.StateRunning, own, true},
		{"no owner label", labels(roleRun, future, ""), container.StateRunning, own, false},
		{"malformed owner label", labels(roleRun, future, here+"/x/5"), container.StateRunning, own, false},
		{"this host unknown", labels(roleRun, future, here+"/101/5"), container.StateRunning, owners{}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := isLeftover(c.labels, c.state, now.Add(-time.Hour), "self", c.own, now); got != c.removed {
				t.Fatalf("isLeftover = %v, want %v", got, c.removed)
			}
		})
	}
}

// TestLocalOwners judges real processes through /proc.
func TestLocalOwners(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("owners are judged through Linux's /proc")
	}
	self, ok := currentOwner()
	if !ok {
		t.Fatal("currentOwner: /proc cannot tell who this process is")
	}
	if self.pid != os.Getpid() || self.start == 0 || strings.Contains(self.host, "/") || strings.Count(self.host, ":") < 2 {
		t.Fatalf("currentOwner = %+v", self)
	}
	own := localOwners()
	if own.dead(self.String()) {
		t.Errorf("this process (%s) is judged dead", self)
	}
	reused := self
	reused.start++
	if !own.dead(reused.String()) {
		t.Errorf("a process with this pid and another start time (%s) is judged alive", reused)
	}
	// A child that has exited and been reaped.
	cmd := exec.Command("true")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	child := self
	child.pid = cmd.Process.Pid
	start, err := processStart(child.pid)
	if err != nil && err != errNoProcess {
		t.Fatal(err)
	}
	child.start = start
	_ = cmd.Wait()
	if _, err := processStart(child.pid); err == nil {
		t.Skipf("pid %d was reused at once", child.pid)
	}
	if !own.dead(child.String()) {
		t.Errorf("an exited child (%s) is judged alive", child)
	}
	elsewhere := self
	elsewhere.host = "another-host:" + self.host
	elsewhere.start++
	if own.dead(elsewhere.String()) {
		t.Errorf("an owner on another host identity (%s) is judged dead", elsewhere)
	}
}
