package main

import (
	"cmp"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
)

// A group is a reason for skipping that many tests share: what they lack,
// and how to run them. docs/development.md#skipped-tests lists the same.
type group struct {
	lacks  string         // what the tests lack, in a few words
	enable string         // how to run them
	reason *regexp.Regexp // matches the skip reasons of the group (in any case)
}

// groups are tried in order: the first whose reason matches takes a skip;
// a skip that none takes is listed by its own reason.
var groups = []group{
	{"-short", "run without -short",
		words(`^-short:`)},
	{"no Kubernetes cluster", "export KUBECONFIG=$(sudo .ci/ensure-kubernetes.sh) makes one on this machine; CODE_EXEC_REQUIRE_K8S=1 fails them instead",
		words(`kubernetes cluster`, `kubeconfig`, `kubernetes mode unavailable`, `kubectl`, `test cluster`)},
	{"no Chromium", "bash .ci/ensure-browser.sh (apt-get install chromium); CODE_EXEC_REQUIRE_BROWSER=1 fails them instead",
		words(`chromium`)},
	{"no HAProxy", "bash .ci/ensure-haproxy.sh (apt-get install haproxy); CODE_EXEC_REQUIRE_HAPROXY=1 fails them instead",
		words(`haproxy`)},
	{"no data-science image", "docker/build-sandbox-image.sh --profile datascience (.ci/ensure-docker.sh builds it too); CODE_EXEC_REQUIRE_DOCKER=1 fails them instead",
		words(`data-science image`)},
	{"no sandbox image", "docker/build-sandbox-image.sh (.ci/ensure-docker.sh builds it too); CODE_EXEC_REQUIRE_DOCKER=1 fails them instead",
		words(`sandbox image`)},
	{"the Docker Engine's socket refuses this user", "run them as root, or give this user an engine as the skip says (the docker group, which is root-equivalent, a rootless engine, DOCKER_HOST); CODE_EXEC_REQUIRE_DOCKER=1 fails them instead",
		words(`may not open it`)},
	{"no Docker Engine", "bash .ci/ensure-docker.sh starts one and builds the sandbox images (or set DOCKER_HOST); CODE_EXEC_REQUIRE_DOCKER=1 fails them instead",
		words(`no docker engine`, `docker engine('s)? socket`, `^docker client:`)},
	{"no pip or npm for process mode's package installs", "bash .ci/ensure-installers.sh; CODE_EXEC_REQUIRE_INSTALLERS=1 fails them instead",
		words(`ensure-installers`)},
	{"no pandas or matplotlib for the host's python3", "bash .ci/ensure-datascience.sh (Debian's python3-pandas, -matplotlib, -scipy); CODE_EXEC_REQUIRE_DATASCIENCE=1 fails them instead",
		words(`pandas`, `matplotlib`, `ensure-datascience`)},
	{"an interpreter is missing", "install python3, node and bash (apt-get install python3 nodejs bash)",
		words(`^language \S+ unavailable`, `is not installed`, `^no (/usr/bin/)?python3`, `^no /bin/bash`)},
	{"not root", "run them as root: sudo env PATH=$PATH go run ./cmd/codeexec-test",
		words(`needs root`, `only root`)},
	{"process mode's kernel isolation unavailable to this user or host", "run as root, on a host that allows user namespaces and has Landlock (docs/modes.md); CODE_EXEC_REQUIRE_ISOLATION=1 fails them instead",
		words(`unavailable on this host`, `unavailable to an ordinary user`, `without user namespaces`)},
}

// words is a case-insensitive regular expression matching any of res.
func words(res ...string) *regexp.Regexp {
	return regexp.MustCompile(`(?i)(` + strings.Join(res, `)|(`) + `)`)
}

// classify returns the index in groups of the group of a skip's reason,
// or -1.
func classify(reason string) int {
	return slices.IndexFunc(groups, func(g group) bool { return g.reason.MatchString(reason) })
}

// A line of the summary: a group, or a reason that no group takes.
type summaryLine struct {
	order  int // the group's index; len(groups) for a reason of its own, one more for none
	count  int
	lacks  string
	enable string
	pkgs   []string
}

// writeSummary writes the skips, one line per group (or per reason that no
// group takes): how many tests, what they lack, in which packages, and how
// to run them; the largest first.
func writeSummary(w io.Writer, skips []skip, module string) {
	if len(skips) == 0 {
		fmt.Fprintln(w, "\nskipped: none")
		return
	}
	byKey := map[string]*summaryLine{}
	var lines []*summaryLine
	for _, s := range skips {
		key, l := s.reason, summaryLine{order: len(groups), lacks: s.reason}
		if l.lacks == "" {
			key, l.lacks, l.order = "", "(the test gave no reason)", len(groups)+1
		}
		if i := classify(s.reason); i >= 0 {
			key, l = groups[i].lacks, summaryLine{order: i, lacks: groups[i].lacks, enable: groups[i].enable}
		}
		if byKey[key] == nil {
			byKey[key] = &l
			lines = append(lines, &l)
		}
		sl := byKey[key]
		sl.count++
		if p := shortPackage(s.pkg, module); !slices.Contains(sl.pkgs, p) {
			sl.pkgs = append(sl.pkgs, p)
		}
	}
	// Packages report in the order they end, which the machine's load
	// decides: the summary is the same whatever it was.
	slices.SortFunc(lines, func(a, b *summaryLine) int {
		return cmp.Or(cmp.Compare(b.count, a.count), cmp.Compare(a.order, b.order), cmp.Compare(a.lacks, b.lacks))
	})
	for _, l := range lines {
		slices.Sort(l.pkgs)
	}
	tests := "tests"
	if len(skips) == 1 {
		tests = "test"
	}
	fmt.Fprintf(w, "\nskipped: %d %s, by reason (how to run each: docs/development.md#skipped-tests)\n", len(skips), tests)
	for _, l := range lines {
		fmt.Fprintf(w, "%6d  %s (in %s)", l.count, l.lacks, listPackages(l.pkgs))
		if l.enable != "" {
			fmt.Fprintf(w, ": %s", l.enable)
		}
		fmt.Fprintln(w)
	}
}

// shortPackage is a package's path without the module's.
func shortPackage(pkg, module string) string {
	if pkg == module && module != "" {
		return "."
	}
	if rest, ok := strings.CutPrefix(pkg, module+"/"); ok && module != "" {
		return rest
	}
	return pkg
}

// listPackages names the first few packages, and how many more there are.
func listPackages(pkgs []string) string {
	const shown = 4
	if len(pkgs) <= shown {
		return strings.Join(pkgs, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(pkgs[:shown], ", "), len(pkgs)-shown)
}
