// Command codeexec-bench compares codeexec's sandbox modes end to end, the
// way an agent sees them: it starts several codeexec servers over stdio,
// connects to each with the official MCP Go SDK client, and calls
// code_execute on each in turn (round-robin, so that drift of the machine
// affects every configuration alike). It prints the median, 90th and 99th
// percentile latency per configuration and language, the ratios docker mode
// is held to, and docker mode's sustained rate.
//
//	go run ./cmd/codeexec-bench -rounds 200
//
// The sustained rate: a fresh docker-mode server per measurement, python
// calls made back to back by 1 and by 4 clients (-concurrency) with no
// pause between a call's answer and the client's next call, so that nothing
// lets the warm pool catch up that a real client would not; and again with
// -think between calls, as an agent waiting for its model (reported apart).
// With -baseline, a second codeexec binary (say, the previous release) is
// measured in the same run, alternating with this one, and the ratios are
// printed:
//
//	go run ./cmd/codeexec-bench -rounds 0 -baseline /path/to/old/codeexec
//
// The configurations: bare (the interpreter started directly, e.g.
// /usr/bin/python3 -c, without codeexec; the servers get PATH=/usr/bin:/bin so
// that they run the same interpreters), none, process, process with
// CODE_EXEC_PYTHON_POLICY=restricted (python only), docker with
// CODE_EXEC_DOCKER_POOL_SIZE=0 (a container created per run) and docker with
// the pool (-pool, default 2). Docker configurations are skipped with
// -docker=false. With -baseline, the baseline binary's process
// configurations are measured too, in the same rounds.
//
// Back to back and with think time (-b2b, see pace.go): each configuration
// called in blocks of calls with no pause between an answer and the next
// call, and again with -b2b-think between them, the blocks of every
// configuration alternating (each back-to-back block after -b2b-warm calls
// that are not counted: a pool catches up while the others run, which it
// does not for a client that keeps calling); the back-to-back rate of
// each, and the ratios to bare, with and without think time:
//
//	go run ./cmd/codeexec-bench -docker=false -rounds 150 -b2b 150 -sustained 0
//
// The cost of docker and kubernetes mode side by side (-cost-rounds, see
// cost.go): a cold sandbox, a warm one and a session call in each mode,
// back to back and with -cost-think between calls:
//
//	KUBECONFIG=... go run ./cmd/codeexec-bench -rounds 0 -sustained 0 -cost-rounds 5
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type program struct {
	lang, code, want string
	bare             []string // the interpreter started directly
}

// restricted is CODE_EXEC_PYTHON_POLICY=restricted.
const restricted = "CODE_EXEC_PYTHON_POLICY=restricted"

var programs = []program{
	{"python", "print(2**64)", "18446744073709551616\n", []string{"/usr/bin/python3", "-c"}},
	{"javascript", "console.log(2n**64n + '')", "18446744073709551616\n", []string{"node", "-e"}},
	{"bash", "echo $((6*7))", "42\n", []string{"bash", "-c"}},
}

// target is one configuration under test.
type target struct {
	name  string
	env   []string           // for a codeexec server; nil for bare
	bin   string             // the server's binary ("": the one built or -bin)
	langs []string           // the languages it is measured with (nil: all)
	cs    *mcp.ClientSession // nil for bare
	proc  *os.Process        // the server's process; nil for bare
	lat   map[string][]time.Duration
}

// measures reports whether t is measured with lang.
func (t *target) measures(lang string) bool { return t.langs == nil || slices.Contains(t.langs, lang) }

func main() {
	rounds := flag.Int("rounds", 100, "calls per configuration and language, interleaved round-robin")
	warmup := flag.Int("warmup", 5, "rounds run first and not counted")
	settle := flag.Duration("settle", 300*time.Millisecond, "pause after the docker configurations in each round, so that their background work (container removal, pool refill) does not land on the next measurements")
	pool := flag.Int("pool", 2, "CODE_EXEC_DOCKER_POOL_SIZE of the pooled docker configuration")
	bin := flag.String("bin", "", "codeexec binary to use (default: build ./cmd/codeexec)")
	withDocker := flag.Bool("docker", true, "include the docker configurations")
	var sus sustained
	flag.IntVar(&sus.calls, "sustained", 100, "calls per sustained-rate measurement (0 skips them)")
	flag.StringVar(&sus.pools, "sustained-pools", "0,2", "pool sizes whose sustained rate is measured")
	flag.StringVar(&sus.concurrency, "concurrency", "1,4", "numbers of clients calling at once in the sustained-rate measurements")
	flag.DurationVar(&sus.think, "think", 250*time.Millisecond, "pause of each client between an answer and its next call, measured apart from the back-to-back figures (0 skips it)")
	flag.StringVar(&sus.baseline, "baseline", "", "a second codeexec binary (say, the previous release) measured in the same run: its process configurations in the latency rounds and back to back, and its docker-mode sustained rate, alternating with this one")
	var pc pace
	flag.IntVar(&pc.calls, "b2b", 30, "calls per configuration and language (python, javascript) made back to back, and again with -b2b-think between them, in blocks that alternate between the configurations (0 skips them)")
	flag.IntVar(&pc.block, "b2b-block", 10, "calls per block of the back-to-back measurement")
	// Process mode's pool keeps at most 2 × CPUs prepared runs of a kind.
	flag.IntVar(&pc.warm, "b2b-warm", 2*runtime.NumCPU()+1, "calls at the start of each back-to-back block that are made but not counted: they find what the configuration prepared while the others ran, which a client that keeps calling does not (default: 2 × CPUs + 1, one more than process mode's pool keeps of a kind)")
	flag.DurationVar(&pc.think, "b2b-think", 250*time.Millisecond, "pause of the client between an answer and its next call in the back-to-back measurement's second pass (0 skips it)")
	var cst cost
	flag.IntVar(&cst.rounds, "cost-rounds", 0, "rounds of the cost measurement, docker and kubernetes mode side by side: cold, warm and session calls (0 skips it)")
	flag.IntVar(&cst.block, "cost-block", 10, "back-to-back calls per configuration and think time in each round of the cost measurement")
	flag.DurationVar(&cst.think, "cost-think", time.Second, "pause of the client between an answer and its next call in the cost measurement's second pass (0 skips it)")
	flag.BoolVar(&cst.kubernetes, "kubernetes", os.Getenv("KUBECONFIG") != "", "include kubernetes mode in the cost measurement (the cluster KUBECONFIG names)")
	flag.StringVar(&cst.cpus, "cost-cpus", "0.5", "CODE_EXEC_CPUS of every configuration of the cost measurement")
	flag.Parse()
	if err := run(*rounds, *warmup, *pool, *bin, *withDocker, sus, *settle, cst, pc); err != nil {
		fmt.Fprintln(os.Stderr, "codeexec-bench:", err)
		os.Exit(1)
	}
}

func run(rounds, warmup, pool int, bin string, withDocker bool, sus sustained, settle time.Duration, cst cost, pc pace) (err error) {
	ctx := context.Background()
	if bin == "" {
		dir, err := os.MkdirTemp("", "codeexec-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		if bin, err = buildCodeexec(dir); err != nil {
			return err
		}
	}

	if withDocker && cst.rounds > 0 {
		// Last, after the latency rounds and the sustained rate.
		defer func() {
			if err == nil {
				err = cst.measure(ctx, bin)
			}
		}()
	}
	if withDocker && sus.calls > 0 {
		// After the latency rounds, whose servers are closed by then.
		defer func() {
			if err == nil {
				err = sus.measure(ctx, bin)
			}
		}()
	}
	if rounds <= 0 && pc.calls <= 0 {
		return nil
	}

	targets := latencyTargets(withDocker, pool, sus.baseline)
	defer closeTargets(targets)
	if err := connectTargets(ctx, bin, targets); err != nil {
		return err
	}
	if withDocker {
		time.Sleep(3 * time.Second) // let the pool fill before the first round
	}
	if rounds > 0 {
		if err := measureLatency(ctx, targets, warmup, rounds, withDocker, settle); err != nil {
			return err
		}
		printLatency(targets, rounds)
		printRatios("interleaved", func(t *target, lang string) []time.Duration { return t.lat[lang] }, targets)
		printDockerRatios(targets, withDocker, pool)
	}
	if pc.calls > 0 {
		return pc.measure(ctx, targets)
	}
	return nil
}

// buildCodeexec builds ./cmd/codeexec into dir, with process mode's run
// helper (./cmd/codeexec-sandbox) beside it, as the README installs them
// (CGO_ENABLED=0), and returns the binary.
func buildCodeexec(dir string) (string, error) {
	bin := filepath.Join(dir, "codeexec")
	fmt.Fprintln(os.Stderr, "building ./cmd/codeexec and ./cmd/codeexec-sandbox ...")
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "./cmd/codeexec", "./cmd/codeexec-sandbox")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return "", fmt.Errorf("building codeexec: %w", err)
	}
	return bin, nil
}

// latencyTargets are the configurations of the latency rounds: bare, none,
// process, process with restricted python, the baseline binary's process
// configurations (unless baseline is ""), and, withDocker, docker without a
// pool and with pool.
func latencyTargets(withDocker bool, pool int, baseline string) []*target {
	targets := []*target{
		{name: "bare"},
		{name: "none", env: []string{"CODE_EXEC_SANDBOX=none"}},
		{name: "process", env: []string{"CODE_EXEC_SANDBOX=process"}},
		{name: "process restricted", env: []string{"CODE_EXEC_SANDBOX=process", restricted}, langs: []string{"python"}},
	}
	if baseline != "" {
		targets = append(targets,
			&target{name: "baseline process", env: []string{"CODE_EXEC_SANDBOX=process"}, bin: baseline},
			&target{name: "baseline process restricted", env: []string{"CODE_EXEC_SANDBOX=process", restricted}, bin: baseline, langs: []string{"python"}})
	}
	if withDocker {
		targets = append(targets,
			&target{name: "docker pool=0", env: []string{"CODE_EXEC_SANDBOX=docker", "CODE_EXEC_DOCKER_POOL_SIZE=0"}},
			&target{name: fmt.Sprintf("docker pool=%d", pool), env: []string{"CODE_EXEC_SANDBOX=docker", fmt.Sprintf("CODE_EXEC_DOCKER_POOL_SIZE=%d", pool)}})
	}
	for _, t := range targets {
		t.lat = map[string][]time.Duration{}
	}
	return targets
}

// connectTargets starts the codeexec server of each target that has one
// and connects to it.
func connectTargets(ctx context.Context, bin string, targets []*target) error {
	for _, t := range targets {
		if t.env == nil {
			continue
		}
		b := bin
		if t.bin != "" {
			b = t.bin
		}
		cs, cmd, err := connectCmd(ctx, b, t.env)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		t.cs, t.proc = cs, cmd.Process
	}
	return nil
}

// closeTargets closes the connected targets' servers, the last first.
func closeTargets(targets []*target) {
	for _, t := range slices.Backward(targets) {
		if t.cs != nil {
			_ = t.cs.Close()
		}
	}
}

// measureLatency makes the warm-up and measured rounds, each program on
// each target in turn, and records the measured latencies.
func measureLatency(ctx context.Context, targets []*target, warmup, rounds int, withDocker bool, settle time.Duration) error {
	fmt.Fprintf(os.Stderr, "%d warm-up and %d measured rounds over %d configurations ...\n", warmup, rounds, len(targets))
	for round := range warmup + rounds {
		for _, p := range programs {
			for _, t := range targets {
				if !t.measures(p.lang) {
					continue
				}
				d, err := t.call(ctx, p)
				if err != nil {
					return fmt.Errorf("%s %s: %w", t.name, p.lang, err)
				}
				if round >= warmup {
					t.lat[p.lang] = append(t.lat[p.lang], d)
				}
			}
			if withDocker {
				time.Sleep(settle)
			}
		}
	}
	return nil
}

// printLatency prints the table of the latencies' percentiles.
func printLatency(targets []*target, rounds int) {
	host, _ := os.Hostname()
	fmt.Printf("codeexec-bench: %d rounds, interleaved; host %s, %d CPUs\n\n", rounds, host, runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tlanguage\tmedian ms\tp90 ms\tp99 ms\t")
	for _, t := range targets {
		for _, p := range programs {
			l := t.lat[p.lang]
			if len(l) == 0 {
				continue
			}
			fmt.Fprintf(tw, "%s\t%s\t%.1f\t%.1f\t%.1f\t\n", t.name, p.lang, ms(pct(l, 50)), ms(pct(l, 90)), ms(pct(l, 99)))
		}
	}
	_ = tw.Flush()
}

// printRatios prints the ratios that process mode is held to, of the
// medians that lat gives (the latencies of a target and language) in the
// measurement called what, and whether each is met: process / bare for
// python (at most 1) and javascript, process with restricted python / bare
// python (at most 1.5), none / bare for python, and process / the
// baseline's process when there is one; and, for docker mode with its warm
// pool, python's p90 over its median (at most 2).
func printRatios(what string, lat func(*target, string) []time.Duration, targets []*target) {
	med := func(name, lang string) float64 {
		for _, t := range targets {
			if t.name == name {
				return ms(pct(lat(t, lang), 50))
			}
		}
		return 0
	}
	fmt.Println()
	fmt.Printf("ratios of medians, %s:\n", what)
	for _, r := range []struct {
		num, den, lang string
		limit          float64
	}{
		{"process", "bare", "python", 1},
		{"process", "bare", "javascript", 1},
		{"process restricted", "bare", "python", 1.5},
		{"none", "bare", "python", 1.3},
		{"process", "baseline process", "python", 0},
		{"process", "baseline process", "javascript", 0},
		{"process restricted", "baseline process restricted", "python", 0},
	} {
		n, d := med(r.num, r.lang), med(r.den, r.lang)
		if n == 0 || d == 0 {
			continue
		}
		ratio(fmt.Sprintf("%s / %s (%s)", r.num, r.den, r.lang), n/d, r.limit, true)
	}
	// Docker mode with its warm pool, at one client: p90 at most twice the
	// median.
	for _, t := range targets {
		if strings.HasPrefix(t.name, "docker pool=") && t.name != "docker pool=0" {
			if l := lat(t, "python"); len(l) > 0 {
				ratio(fmt.Sprintf("%s p90 / median (python)", t.name), ms(pct(l, 90))/ms(pct(l, 50)), 2, true)
			}
		}
	}
}

// ratio prints one ratio and, with a limit above 0, whether it is met: v
// at most limit (atMost) or at least limit.
func ratio(what string, v, limit float64, atMost bool) {
	if limit <= 0 {
		fmt.Printf("  %-58s %6.2f\n", what, v)
		return
	}
	ok := v <= limit
	cmp := "<="
	if !atMost {
		ok, cmp = v >= limit, ">="
	}
	verdict := "met"
	if !ok {
		verdict = "NOT met"
	}
	fmt.Printf("  %-58s %6.2f  (target %s %.2f: %s)\n", what, v, cmp, limit, verdict)
}

// printDockerRatios prints the ratios of python's medians that docker mode
// is held to, and whether each is met.
func printDockerRatios(targets []*target, withDocker bool, pool int) {
	if !withDocker {
		return
	}
	med := func(name string) float64 {
		for _, t := range targets {
			if t.name == name {
				return ms(pct(t.lat["python"], 50))
			}
		}
		return 0
	}
	fmt.Println()
	fmt.Println("docker mode's ratios (python, print(2**64)):")
	pooled := fmt.Sprintf("docker pool=%d", pool)
	ratio(pooled+" median / process median", med(pooled)/med("process"), 1.0, true)
	ratio("docker pool=0 median / "+pooled+" median", med("docker pool=0")/med(pooled), 8, false)
	// p90 / median of the pooled configuration: printRatios, for every
	// measurement.
}

// connect starts a codeexec server over stdio with env added to the
// benchmark's environment.
func connect(ctx context.Context, bin string, env []string) (*mcp.ClientSession, error) {
	cs, _, err := connectCmd(ctx, bin, env)
	return cs, err
}

// connectCmd is connect, with the server's command.
func connectCmd(ctx context.Context, bin string, env []string) (*mcp.ClientSession, *exec.Cmd, error) {
	cmd := exec.Command(bin)
	// PATH=/usr/bin:/bin: modes none and process then find the same
	// /usr/bin/python3 that bare runs (not a pyenv shim or another build).
	cmd.Env = append(os.Environ(), append([]string{"PATH=/usr/bin:/bin", "CODE_EXEC_LOG_LEVEL=warn", "CODE_EXEC_TRANSPORT=stdio"}, env...)...)
	cmd.Stderr = io.Discard
	if os.Getenv("CODEEXEC_BENCH_SERVER_LOGS") == "1" {
		cmd.Stderr = os.Stderr
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "codeexec-bench", Version: "1.0.0"}, nil)
	cs, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd, TerminateDuration: 30 * time.Second}, nil)
	return cs, cmd, err
}

// call runs p once and returns the wall time from the request to the answer.
func (t *target) call(ctx context.Context, p program) (time.Duration, error) {
	if t.cs == nil {
		args := append(slices.Clone(p.bare[1:]), p.code)
		start := time.Now()
		out, err := exec.CommandContext(ctx, p.bare[0], args...).Output()
		d := time.Since(start)
		if err != nil || string(out) != p.want {
			return d, fmt.Errorf("bare %s: %q %v", p.bare[0], out, err)
		}
		return d, nil
	}
	return execute(ctx, t.cs, p)
}

func execute(ctx context.Context, cs *mcp.ClientSession, p program) (time.Duration, error) {
	return executeIn(ctx, cs, p, "")
}

// executeIn runs p once, in the session sid unless it is empty, and returns
// the wall time from the request to the answer.
func executeIn(ctx context.Context, cs *mcp.ClientSession, p program, sid string) (time.Duration, error) {
	args := map[string]any{"language": p.lang, "code": p.code}
	if sid != "" {
		args["session_id"] = sid
	}
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "code_execute", Arguments: args})
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	sc, _ := res.StructuredContent.(map[string]any)
	if res.IsError || sc == nil || sc["stdout"] != p.want {
		return d, fmt.Errorf("unexpected result: isError=%v %v", res.IsError, res.StructuredContent)
	}
	return d, nil
}

// throughput makes n python calls from c workers, each pausing think
// between an answer and its next call, and returns calls per second.
func throughput(ctx context.Context, cs *mcp.ClientSession, n, c int, think time.Duration) (float64, []time.Duration, error) {
	work := make(chan struct{})
	var (
		mu   sync.Mutex
		last time.Time // the last answer
		lat  []time.Duration
		errs []error
		wg   sync.WaitGroup
	)
	start := time.Now()
	for range c {
		wg.Go(func() {
			for range work {
				d, err := execute(ctx, cs, programs[0])
				mu.Lock()
				last = time.Now()
				lat = append(lat, d)
				if err != nil {
					errs = append(errs, err)
				}
				mu.Unlock()
				time.Sleep(think)
			}
		})
	}
	for range n {
		work <- struct{}{}
	}
	close(work)
	wg.Wait()
	return float64(n) / last.Sub(start).Seconds(), lat, errors.Join(errs...)
}

// pct returns the p-th percentile (nearest rank).
func pct(l []time.Duration, p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
