package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// sustained describes the sustained-rate measurements of docker mode.
type sustained struct {
	calls       int           // python calls per measurement
	pools       string        // CODE_EXEC_DOCKER_POOL_SIZE values
	concurrency string        // numbers of clients
	think       time.Duration // pause between an answer and the next call; 0 skips
	baseline    string        // another codeexec binary, measured alongside
}

// rate is one measurement's result.
type rate struct {
	perSecond   float64
	median, p90 time.Duration
}

// measure runs every measurement: per pool size, concurrency and think
// time, a fresh docker-mode server of each binary in turn (the order
// alternates from one measurement to the next), with python only.
func (s sustained) measure(ctx context.Context, bin string) error {
	pools, err := ints(s.pools)
	if err != nil {
		return fmt.Errorf("-sustained-pools: %w", err)
	}
	clients, err := ints(s.concurrency)
	if err != nil {
		return fmt.Errorf("-concurrency: %w", err)
	}
	bins := []string{bin}
	if s.baseline != "" {
		if _, err := os.Stat(s.baseline); err != nil {
			return fmt.Errorf("-baseline: %w", err)
		}
		bins = append(bins, s.baseline)
	}
	thinks := []time.Duration{0}
	if s.think > 0 {
		thinks = append(thinks, s.think)
	}
	fmt.Fprintf(os.Stderr, "sustained rate: %d measurements of %d calls ...\n", len(pools)*len(clients)*len(thinks)*len(bins), s.calls)

	// The measurements, in the order they are made and reported.
	type point struct {
		pool, clients int
		think         time.Duration
	}
	var points []point
	for _, think := range thinks {
		for _, pool := range pools {
			for _, c := range clients {
				points = append(points, point{pool, c, think})
			}
		}
	}
	got := make([][]rate, len(points)) // by point, then binary
	for i, pt := range points {
		got[i] = make([]rate, len(bins))
		order := []int{0, 1}[:len(bins)]
		if i%2 == 1 && len(bins) == 2 {
			order = []int{1, 0}
		}
		for _, b := range order {
			r, err := s.one(ctx, bins[b], pt.pool, pt.clients, pt.think)
			if err != nil {
				return fmt.Errorf("%s pool %d, %d clients, think %v: %w", bins[b], pt.pool, pt.clients, pt.think, err)
			}
			got[i][b] = r
		}
	}

	fmt.Println()
	fmt.Printf("docker mode's sustained rate (python print(2**64), %d calls per measurement, a fresh server each, CODE_EXEC_MAX_CONCURRENCY=4):\n", s.calls)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "binary\tpool\tclients\tthink\truns/s\tmedian ms\tp90 ms\t")
	for i, pt := range points {
		for b, r := range got[i] {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%.1f\t%.1f\t%.1f\t\n", name(bins, b), pt.pool, pt.clients, pt.think, r.perSecond, ms(r.median), ms(r.p90))
		}
	}
	_ = tw.Flush()
	if len(bins) == 2 {
		fmt.Println()
		fmt.Printf("rate of %s / rate of %s:\n", name(bins, 0), name(bins, 1))
		for i, pt := range points {
			fmt.Printf("  pool %d, %d clients, think %v: %.2fx\n", pt.pool, pt.clients, pt.think, got[i][0].perSecond/got[i][1].perSecond)
		}
	}
	return nil
}

// one measures a fresh server of bin.
func (s sustained) one(ctx context.Context, bin string, pool, clients int, think time.Duration) (rate, error) {
	cs, err := connect(ctx, bin, []string{"CODE_EXEC_SANDBOX=docker", "CODE_EXEC_DOCKER_POOL_SIZE=" + strconv.Itoa(pool), "CODE_EXEC_LANGUAGES=python", "CODE_EXEC_MAX_CONCURRENCY=4"})
	if err != nil {
		return rate{}, err
	}
	defer cs.Close()
	time.Sleep(3 * time.Second) // the pool fills, as for a server that has been up a while
	perSecond, lat, err := throughput(ctx, cs, s.calls, clients, think)
	if err != nil {
		return rate{}, err
	}
	return rate{perSecond: perSecond, median: pct(lat, 50), p90: pct(lat, 90)}, nil
}

// name tells the binaries apart in the report.
func name(bins []string, i int) string {
	if len(bins) == 1 {
		return "codeexec"
	}
	if i == 1 {
		return "baseline (" + filepath.Base(bins[1]) + ")"
	}
	return "this (" + filepath.Base(bins[0]) + ")"
}

func ints(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("%q is not a list of whole numbers", list)
		}
		out = append(out, n)
	}
	return out, nil
}
