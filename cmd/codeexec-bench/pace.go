package main

import (
	"context"
	"fmt"
	"os"
	"text/tabwriter"
	"time"
)

// pace measures every configuration of the latency rounds as a client
// that calls back to back (its next call as soon as it has the answer) and
// as one that thinks (think between an answer and its next call, like an
// agent waiting for its model), for python and javascript. Each
// configuration and language is called in blocks of block calls, no other
// call between them; the blocks of every configuration alternate, round
// after round, so that drift of the machine hits each alike. While the
// other configurations' blocks run, a configuration's pool catches up,
// which it does not for a client that keeps calling: so each back-to-back
// block starts with warm calls that are made but not counted (process
// mode's pool keeps at most 2 × CPUs runs of a kind ahead). The
// back-to-back rate is the counted calls of a configuration's back-to-back
// blocks over the time they took; its CPU per call is the CPU time that the
// configuration's processes used in them (see cpuTime) over their calls.
type pace struct {
	calls, block, warm int
	think              time.Duration
}

// paceLangs are the languages of the pace measurement.
var paceLangs = []string{"python", "javascript"}

// paced is what the pace measurement records of one configuration, by
// think time and language.
type paced struct {
	lat  map[time.Duration]map[string][]time.Duration
	busy map[string]time.Duration // wall time of the back-to-back blocks
	cpu  map[string]time.Duration // CPU time of the back-to-back blocks
	// noCPU is set when the CPU time could not be read.
	noCPU bool
}

func (pc pace) measure(ctx context.Context, targets []*target) error {
	thinks := []time.Duration{0}
	if pc.think > 0 {
		thinks = append(thinks, pc.think)
	}
	block := max(1, pc.block)
	rounds := (pc.calls + block - 1) / block
	fmt.Fprintf(os.Stderr, "back to back and with think time: %d rounds of %d calls per configuration, language and think time ...\n", rounds, block)
	got := map[*target]*paced{}
	for _, t := range targets {
		got[t] = &paced{lat: map[time.Duration]map[string][]time.Duration{}, busy: map[string]time.Duration{}, cpu: map[string]time.Duration{}}
		for _, think := range thinks {
			got[t].lat[think] = map[string][]time.Duration{}
		}
	}
	progs := map[string]program{}
	for _, p := range programs {
		progs[p.lang] = p
	}
	for round := range rounds {
		n := min(block, pc.calls-round*block)
		for _, think := range thinks {
			for _, lang := range paceLangs {
				for _, t := range targets {
					if !t.measures(lang) {
						continue
					}
					warm := 0
					if think == 0 {
						warm = pc.warm
					}
					var start time.Time
					var cpu0 time.Duration
					var cpuOK bool
					for i := range warm + n {
						if i == warm {
							start = time.Now()
							cpu0, cpuOK = cpuTime(t)
						}
						if i > 0 {
							time.Sleep(think) // the client's think time, between an answer and its next call
						}
						d, err := t.call(ctx, progs[lang])
						if err != nil {
							return fmt.Errorf("%s %s: %w", t.name, lang, err)
						}
						if i >= warm {
							got[t].lat[think][lang] = append(got[t].lat[think][lang], d)
						}
					}
					if think == 0 {
						got[t].busy[lang] += time.Since(start)
						cpu1, ok := cpuTime(t)
						got[t].cpu[lang] += cpu1 - cpu0
						got[t].noCPU = got[t].noCPU || !ok || !cpuOK
					}
				}
			}
		}
	}
	pc.print(targets, thinks, got)
	return nil
}

func (pc pace) print(targets []*target, thinks []time.Duration, got map[*target]*paced) {
	fmt.Printf("\nback to back and with think time: %d calls per configuration, language and think time, in blocks of %d (back to back: after %d uncounted)\n\n", pc.calls, pc.block, pc.warm)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "configuration\tlanguage\tthink time\tmedian ms\tp90 ms\tp99 ms\tcalls/s\tCPU ms/call\t")
	for _, think := range thinks {
		for _, lang := range paceLangs {
			for _, t := range targets {
				l := got[t].lat[think][lang]
				if len(l) == 0 {
					continue
				}
				rate, cpu := "-", "-"
				if think == 0 {
					rate = fmt.Sprintf("%.1f", float64(len(l))/got[t].busy[lang].Seconds())
					if !got[t].noCPU {
						cpu = fmt.Sprintf("%.1f", ms(got[t].cpu[lang])/float64(len(l)))
					}
				}
				fmt.Fprintf(tw, "%s\t%s\t%v\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", t.name, lang, think, ms(pct(l, 50)), ms(pct(l, 90)), ms(pct(l, 99)), rate, cpu)
			}
		}
	}
	_ = tw.Flush()
	for _, think := range thinks {
		what := "back to back"
		if think > 0 {
			what = fmt.Sprintf("with %v of think time", think)
		}
		printRatios(what, func(t *target, lang string) []time.Duration { return got[t].lat[think][lang] }, targets)
	}
}
