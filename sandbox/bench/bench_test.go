// Package bench compares the sandbox modes side by side on the same program.
//
//	go test ./sandbox/bench -run '^$' -bench . -benchtime 50x
package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/codeexec/codeexec/sandbox"
	"github.com/codeexec/codeexec/sandbox/artifacts"
	"github.com/codeexec/codeexec/sandbox/docker"
	"github.com/codeexec/codeexec/sandbox/host"
	"github.com/codeexec/codeexec/sandbox/process"
	"github.com/codeexec/codeexec/sandbox/sandboxtest"
	"github.com/codeexec/codeexec/sandbox/sessions"
)

func TestMain(m *testing.M) {
	process.MaybeRunHelper()
	os.Exit(m.Run())
}

const program = "print(2**64)"

// BenchmarkPython runs print(2**64) once per iteration: started directly
// (the floor), and through each sandbox mode.
func BenchmarkPython(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		py, err := exec.LookPath("/usr/bin/python3")
		if err != nil {
			b.Skip("no /usr/bin/python3")
		}
		for b.Loop() {
			out, err := exec.Command(py, "-c", program).Output()
			if err != nil || string(out) != "18446744073709551616\n" {
				b.Fatalf("%q %v", out, err)
			}
		}
	})
	ctx := context.Background()
	langs := sandbox.LanguageNames()
	modes := []struct {
		name string
		make func() (sandbox.Runner, error)
	}{
		// Mode none runs the interpreter found on the server's PATH; give it
		// the same /usr/bin/python3 as "bare" (not a pyenv shim's python).
		{"none", func() (sandbox.Runner, error) {
			b.Setenv("PATH", "/usr/bin:/bin")
			return host.New(ctx, host.Config{Languages: langs})
		}},
		// The server's default: one run prepared ahead of demand
		// (CODE_EXEC_PROCESS_POOL_SIZE=1), refilled while the next
		// iteration runs, back to back with no pause.
		{"process", func() (sandbox.Runner, error) { return process.New(ctx, process.Config{Languages: langs, PoolSize: 1}) }},
		{"process-on-demand", func() (sandbox.Runner, error) { return process.New(ctx, process.Config{Languages: langs}) }},
		{"process-without-isolation", func() (sandbox.Runner, error) {
			return process.New(ctx, process.Config{Languages: langs, Disable: process.Features})
		}},
		{"docker", func() (sandbox.Runner, error) {
			return docker.New(ctx, docker.Config{Image: dockerImage(), Languages: langs})
		}},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			r, err := m.make()
			if err != nil {
				if m.name == "docker" && os.Getenv("CODE_EXEC_REQUIRE_DOCKER") != "1" {
					b.Skipf("docker mode unavailable: %v", err)
				}
				b.Fatal(err)
			}
			defer r.Close()
			if m.name == "process" || m.name == "process-on-demand" {
				requireIsolation(b, r)
			}
			// As the server asks: a plain call also collects what the
			// program left in its working directory (nothing, here).
			req := sandboxtest.Req("python", program)
			req.Artifacts = &artifacts.Options{}
			for b.Loop() {
				res, err := r.Run(ctx, req)
				if err != nil || res.Stdout != "18446744073709551616\n" {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
	}
}

// requireIsolation says which kernel protections a process-mode runner
// lacks: a figure measured without them would flatter process mode. With
// CODE_EXEC_REQUIRE_ISOLATION=1 a missing one fails the benchmark.
func requireIsolation(b *testing.B, r sandbox.Runner) {
	b.Helper()
	for _, p := range r.Capabilities().Protections {
		if p.Active {
			continue
		}
		if os.Getenv("CODE_EXEC_REQUIRE_ISOLATION") == "1" {
			b.Fatalf("process mode runs without %s (%s): the figure would not be process mode's", p.Name, p.Detail)
		}
		b.Logf("NOTE: process mode runs without %s here (%s)", p.Name, p.Detail)
	}
}

func dockerImage() string {
	if img := os.Getenv("CODE_EXEC_DOCKER_IMAGE"); img != "" {
		return img
	}
	return "codeexec-sandbox:latest"
}

// TestModesAgree makes sure the benchmark measures the same work in every
// mode: one run of the program per mode, with the same answer.
func TestModesAgree(t *testing.T) {
	ctx := context.Background()
	for _, mk := range []func() (sandbox.Runner, error){
		func() (sandbox.Runner, error) { return host.New(ctx, host.Config{Languages: []string{"python"}}) },
		func() (sandbox.Runner, error) { return process.New(ctx, process.Config{Languages: []string{"python"}}) },
	} {
		r, err := mk()
		if err != nil {
			t.Fatal(err)
		}
		res, err := r.Run(ctx, sandboxtest.Req("python", program))
		_ = r.Close()
		if err != nil || res.Stdout != fmt.Sprintln("18446744073709551616") {
			t.Fatalf("%s: %+v %v", r.Capabilities().Mode, res, err)
		}
	}
}

// BenchmarkPythonSession runs print(2**64) once per iteration as a call in
// a live session of each mode, beside BenchmarkPython's runs.
func BenchmarkPythonSession(b *testing.B) {
	ctx := context.Background()
	langs := sandbox.LanguageNames()
	for _, m := range []struct {
		name string
		make func() (sandbox.Runner, sessions.Backend, error)
	}{
		{"none", func() (sandbox.Runner, sessions.Backend, error) {
			b.Setenv("PATH", "/usr/bin:/bin")
			r, err := host.New(ctx, host.Config{Languages: langs})
			if err != nil {
				return nil, nil, err
			}
			return r, r.Sessions(), nil
		}},
		{"process", func() (sandbox.Runner, sessions.Backend, error) {
			r, err := process.New(ctx, process.Config{Languages: langs})
			if err != nil {
				return nil, nil, err
			}
			return r, r.Sessions(), nil
		}},
		{"docker", func() (sandbox.Runner, sessions.Backend, error) {
			r, err := docker.New(ctx, docker.Config{Image: dockerImage(), Languages: langs})
			if err != nil {
				return nil, nil, err
			}
			return r, r.Sessions(), nil
		}},
	} {
		b.Run(m.name, func(b *testing.B) {
			r, backend, err := m.make()
			if err != nil {
				if m.name == "docker" && os.Getenv("CODE_EXEC_REQUIRE_DOCKER") != "1" {
					b.Skipf("docker mode unavailable: %v", err)
				}
				b.Fatal(err)
			}
			defer r.Close()
			s, err := backend.Start(ctx, sessions.Spec{ID: "ses_bench", Language: "python", Limits: sandboxtest.DefaultLimits(), Deadline: time.Now().Add(time.Hour)})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			req := sandboxtest.Req("python", program)
			for b.Loop() {
				res, err := s.Exec(ctx, req)
				if err != nil || res.Stdout != "18446744073709551616\n" {
					b.Fatalf("%+v %v", res, err)
				}
			}
		})
	}
}
