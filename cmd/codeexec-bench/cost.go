package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// cost compares what a python call costs in docker mode and in kubernetes
// mode on the same machine: a cold sandbox (pool size 0), a warm one (pool
// size 1) and a call in a live session of each mode, every one with the
// same limits (CODE_EXEC_CPUS, the default memory) and the same program.
//
// A configuration is measured in blocks of back-to-back calls, so that no
// other configuration's call gives its pool time to refill that a client
// calling back to back would not give it; the blocks of every
// configuration alternate, round after round, so that drift of the machine
// hits each alike. Each block is made twice: with no pause between an
// answer and the next call, and with -cost-think between them, as an agent
// waiting for its model.
type cost struct {
	rounds, block int
	think         time.Duration
	kubernetes    bool
	cpus          string
}

// costTarget is one configuration of the cost measurement.
type costTarget struct {
	name    string
	env     []string
	session bool
	cs      *mcp.ClientSession
	sid     string                            // the live session's id, for session targets
	lat     map[time.Duration][]time.Duration // by think time
}

func (c cost) targets() []*costTarget {
	common := []string{"CODE_EXEC_LANGUAGES=python", "CODE_EXEC_CPUS=" + c.cpus}
	docker := append([]string{"CODE_EXEC_SANDBOX=docker"}, common...)
	ts := []*costTarget{
		{name: "docker cold (pool 0)", env: append([]string{"CODE_EXEC_DOCKER_POOL_SIZE=0"}, docker...)},
		{name: "docker warm (pool 1)", env: append([]string{"CODE_EXEC_DOCKER_POOL_SIZE=1"}, docker...)},
		{name: "docker session call", env: append([]string{"CODE_EXEC_DOCKER_POOL_SIZE=0"}, docker...), session: true},
	}
	if c.kubernetes {
		kube := append([]string{"CODE_EXEC_SANDBOX=kubernetes"}, common...)
		ts = append(ts,
			&costTarget{name: "kubernetes cold (pool 0)", env: append([]string{"CODE_EXEC_K8S_POOL_SIZE=0"}, kube...)},
			&costTarget{name: "kubernetes warm (pool 1)", env: append([]string{"CODE_EXEC_K8S_POOL_SIZE=1"}, kube...)},
			&costTarget{name: "kubernetes session call", env: append([]string{"CODE_EXEC_K8S_POOL_SIZE=0"}, kube...), session: true})
	}
	return ts
}

// measure starts every configuration's server, makes the rounds and prints
// the table and the ratios.
func (c cost) measure(ctx context.Context, bin string) error {
	ts := c.targets()
	defer func() {
		for _, t := range ts {
			if t.cs != nil {
				_ = t.cs.Close()
			}
		}
	}()
	for _, t := range ts {
		cs, err := connect(ctx, bin, t.env)
		if err != nil {
			return fmt.Errorf("%s: %w", t.name, err)
		}
		t.cs, t.lat = cs, map[time.Duration][]time.Duration{}
		if t.session {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "session_create", Arguments: map[string]any{"language": "python"}})
			if err != nil {
				return fmt.Errorf("%s: session_create: %w", t.name, err)
			}
			sc, _ := res.StructuredContent.(map[string]any)
			if t.sid, _ = sc["session_id"].(string); res.IsError || t.sid == "" {
				return fmt.Errorf("%s: session_create: %v", t.name, res.StructuredContent)
			}
		}
	}
	thinks := []time.Duration{0}
	if c.think > 0 {
		thinks = append(thinks, c.think)
	}
	fmt.Fprintf(os.Stderr, "cost: %d rounds of %d calls per configuration and think time, %d configurations ...\n", c.rounds, c.block, len(ts))
	// A first block per configuration, not counted: each server's first
	// calls (and its pool's first fill) are not what a running server costs.
	for _, t := range ts {
		for range c.block {
			if _, err := t.call(ctx); err != nil {
				return fmt.Errorf("%s: %w", t.name, err)
			}
		}
	}
	for range c.rounds {
		for _, think := range thinks {
			for _, t := range ts {
				for i := range c.block {
					if i > 0 {
						time.Sleep(think) // the client's think time, between an answer and its next call
					}
					d, err := t.call(ctx)
					if err != nil {
						return fmt.Errorf("%s: %w", t.name, err)
					}
					t.lat[think] = append(t.lat[think], d)
				}
			}
		}
	}
	c.print(ts, thinks)
	return nil
}

// call makes one python call, in the target's session if it has one.
func (t *costTarget) call(ctx context.Context) (time.Duration, error) {
	return executeIn(ctx, t.cs, programs[0], t.sid)
}

func (c cost) print(ts []*costTarget, thinks []time.Duration) {
	fmt.Printf("\ncost: python print(2**64), CODE_EXEC_CPUS=%s, %d rounds of %d calls per configuration and think time\n\n", c.cpus, c.rounds, c.block)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tthink time\tcalls\tmedian ms\tp90 ms\tp99 ms\t")
	for _, think := range thinks {
		for _, t := range ts {
			l := t.lat[think]
			fmt.Fprintf(tw, "%s\t%v\t%d\t%.1f\t%.1f\t%.1f\t\n", t.name, think, len(l), ms(pct(l, 50)), ms(pct(l, 90)), ms(pct(l, 99)))
		}
	}
	_ = tw.Flush()
	if !c.kubernetes {
		return
	}
	fmt.Println("\nratios of medians, kubernetes / docker:")
	for _, think := range thinks {
		for i := range 3 {
			d, k := ts[i], ts[i+3]
			fmt.Printf("  %-26s think %-6v %6.2f\n", k.name, think, ms(pct(k.lat[think], 50))/ms(pct(d.lat[think], 50)))
		}
	}
}
