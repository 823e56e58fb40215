package approvals

import (
	"fmt"
	"slices"
	"strings"

	"github.com/codeexec/codeexec/sandbox/egress"
)

// Category is a kind of risky behaviour that the risk check looks for.
type Category string

// The categories of the risk check.
const (
	CategoryNetwork    Category = "network"
	CategorySubprocess Category = "subprocess"
	CategoryFiles      Category = "files"
	CategoryPrivilege  Category = "privilege"
	CategorySecrets    Category = "secrets"
	CategoryDynamic    Category = "dynamic-code"
	// CategoryHidden: text that reads otherwise than it runs (hidden or
	// control characters, wide gaps, look-alike names, another encoding).
	CategoryHidden Category = "hidden-text"
	// CategoryUnasked: a file of the request that runs without the code
	// naming it (it takes the place of a module, or runs at start).
	CategoryUnasked Category = "runs-unasked"
	// CategoryOpaque: a file of the request that holds code a person
	// cannot read (an executable, bytecode, an archive, unknown binary data).
	CategoryOpaque Category = "opaque-code"
	// CategoryUnchecked: the risk check stopped before the end of a text
	// (it has a budget of work per request).
	CategoryUnchecked Category = "unchecked"
	// CategoryRefused is a note, not a risk: a language policy that runs
	// inside the sandbox (restricted Python) will refuse the code anyway.
	// Alone it does not make a run need approval (see Policy.Requires).
	CategoryRefused Category = "refused"
)

// Finding is one thing the risk check flagged.
type Finding struct {
	Category Category `json:"category"`
	// Reason is one human-readable sentence fragment, shown to the approver,
	// such as `network access: imports "socket" (line 3)`.
	Reason string `json:"reason"`
	// Line is the 1-based line of the first match.
	Line int `json:"line"`
}

// rule is one pattern of the risk check.
type rule struct {
	category Category
	what     string // completes "<category label>: <what>"
	p        pattern
}

var categoryLabel = map[Category]string{
	CategoryNetwork:    "network access",
	CategorySubprocess: "starts other programs",
	CategoryFiles:      "deletes or overwrites files",
	CategoryPrivilege:  "changes privileges or permissions",
	CategorySecrets:    "reads environment variables or credentials",
	CategoryDynamic:    "runs dynamically built code",
	CategoryHidden:     "hides or disguises text",
	CategoryUnasked:    "runs without the code naming it",
	CategoryOpaque:     "brings code that cannot be shown",
	CategoryUnchecked:  "too long for the risk check to read in full",
	CategoryRefused:    "would be refused anyway by the restricted Python policy",
}

// Refused is the Finding of a language policy that will refuse the code
// anyway, at line, because of what (such as `imports "os"`).
func Refused(line int, what string) Finding {
	return Finding{Category: CategoryRefused, Line: line, Reason: fmt.Sprintf("%s: %s (line %d)", categoryLabel[CategoryRefused], what, line)}
}

func r(c Category, what, expr string) rule {
	return rule{category: c, what: what, p: newPattern(expr)}
}

// credentialPaths are files that hold secrets, whatever the language.
const credentialPaths = `(\.ssh/|id_rsa|id_ed25519|id_ecdsa|\.aws/credentials|\.aws/config|\.netrc|\.git-credentials|/etc/shadow|/etc/sudoers|\.kube/config|\.docker/config\.json|\.npmrc|\.pypirc|\.gnupg|/proc/(self|\d+)/environ|codeexec/admin-[^/\s'"]*\.token)`

var commonRules = []rule{
	r(CategorySecrets, "names a credential file %s", credentialPaths),
}

// rules are the per-language patterns. They are deliberately broad: a false
// alarm costs a click, a miss costs more. They are not a security boundary.
var rules = map[string][]rule{
	"python": {
		r(CategoryNetwork, "imports %s", `\b(?:import|from)\s+(?:[\w.]+\s*,\s*)*(socket|ssl|requests|urllib\d?|urllib\.request|http\.client|http\.server|httpx|aiohttp|ftplib|smtplib|poplib|imaplib|telnetlib|paramiko|websocket|websockets|xmlrpc|asyncio\.streams)\b`),
		r(CategoryNetwork, "calls %s", `\b(urlopen|create_connection|socket\.socket|getaddrinfo|gethostbyname)\s*\(`),
		r(CategorySubprocess, "uses %s", `\b(subprocess|multiprocessing|pty\.spawn|asyncio\.create_subprocess_\w+)\b`),
		r(CategorySubprocess, "calls %s", `\b(os\.(?:system|popen|exec\w*|spawn\w*|fork|forkpty|posix_spawn\w*|kill|killpg))\s*\(`),
		r(CategoryFiles, "calls %s", `\b(os\.(remove|unlink|rmdir|removedirs|truncate|rename|replace)|shutil\.(rmtree|move|copy\w*)|\.unlink|\.rmdir|\.write_text|\.write_bytes|\.rename|\.replace)\s*\(`),
		r(CategoryFiles, "opens a file for writing: %s", `\bopen\s*\([^)]*,\s*(?:mode\s*=\s*)?['"][rwabxt+]*[wax+][rwabxt+]*['"]`),
		r(CategoryPrivilege, "calls %s", `\b(os\.(?:setuid|setgid|seteuid|setegid|setreuid|setregid|setresuid|setresgid|setgroups|chmod|fchmod|lchmod|chown|fchown|lchown|chroot|umask))\s*\(`),
		r(CategoryPrivilege, "uses %s", `\b(sudo|ctypes|prctl)\b`),
		r(CategorySecrets, "reads %s", `\b(os\.environ|os\.getenv|os\.environb|getpass|keyring|environ\[)`),
		r(CategoryDynamic, "calls %s", `(?:^|[^\w.])(eval|exec|compile|__import__)\s*\(`),
		r(CategoryDynamic, "uses %s", `\b(importlib|pickle\.loads?|marshal\.loads?|base64\.b64decode|codecs\.decode)\b`),
	},
	"javascript": {
		r(CategoryNetwork, "loads the %s module", `(?:require\s*\(\s*|from\s+|import\s*\(\s*|import\s+)['"](?:node:)?(net|http|https|http2|dgram|tls|dns|undici|axios|node-fetch|ws)['"]`),
		r(CategoryNetwork, "calls %s", `\b(fetch|XMLHttpRequest|WebSocket|EventSource)\s*\(|new\s+(WebSocket|XMLHttpRequest)\b`),
		r(CategorySubprocess, "loads the %s module", `(?:require\s*\(\s*|from\s+|import\s*\(\s*|import\s+)['"](?:node:)?(child_process|cluster|worker_threads)['"]`),
		r(CategorySubprocess, "calls %s", `\b(execSync|execFileSync|spawnSync|execFile|spawn|fork|process\.kill|process\.binding|process\.dlopen)\s*\(`),
		r(CategoryFiles, "calls %s", `\b(unlink|unlinkSync|rm|rmSync|rmdir|rmdirSync|writeFile|writeFileSync|appendFile|appendFileSync|truncate|truncateSync|rename|renameSync|copyFile|copyFileSync|createWriteStream|cp|cpSync)\s*\(`),
		r(CategoryPrivilege, "calls %s", `\b(process\.(setuid|setgid|seteuid|setegid|setgroups|initgroups|umask)|chmod|chmodSync|chown|chownSync|lchown|lchownSync)\s*\(`),
		r(CategorySecrets, "reads %s", `\bprocess\.env\b`),
		r(CategoryDynamic, "calls %s", `(?:^|[^\w.])(eval|Function)\s*\(|new\s+Function\b|\bsetTimeout\s*\(\s*['"]|\bsetInterval\s*\(\s*['"]`),
		r(CategoryDynamic, "loads the %s module", `(?:require\s*\(\s*|from\s+|import\s+)['"](?:node:)?(vm|module|inspector)['"]`),
		r(CategoryDynamic, "uses %s", `\bimport\s*\(\s*[^'"\s)]|\brequire\s*\(\s*[^'"\s)]`),
	},
	"bash": {
		r(CategoryNetwork, "runs %s", `(?:^|[;&|(\s\x60])(curl|wget|nc|ncat|netcat|socat|ssh|scp|sftp|rsync|telnet|ftp|dig|nslookup|ping|nmap|git\s+(?:clone|fetch|pull|push))\b`),
		r(CategoryNetwork, "opens %s", `/dev/(tcp|udp)/`),
		r(CategorySubprocess, "runs %s", `(?:^|[;&|(\s\x60])((?:ba|z|da|k)?sh\s+-c|python\d*|node|perl|ruby|php|nohup|setsid|disown|xargs|exec|crontab|systemctl|service|kill|pkill|killall)\b`),
		r(CategorySubprocess, "uses %s", `(-exec\b|&\s*$|&\s*#)`),
		r(CategoryFiles, "runs %s", `(?:^|[;&|(\s\x60])(rm|rmdir|unlink|shred|truncate|dd|mv|mkfs\w*|wipefs|chattr)\b`),
		r(CategoryFiles, "uses %s", `(-delete\b|\bsed\s+-i\b|\btee\b)`),
		r(CategoryFiles, "redirects output into a file: %s", `(?:^|[^0-9&<>=-])(>>?\s*"?[^\s&|;>"()]+)`),
		r(CategoryPrivilege, "runs %s", `(?:^|[;&|(\s\x60])(sudo|su|doas|pkexec|chmod|chown|chgrp|setcap|setfacl|chroot|nsenter|unshare|mount|umount|capsh|newgrp|useradd|usermod|passwd|ulimit)\b`),
		r(CategorySecrets, "runs %s", `(?:^|[;&|(\s\x60])(env|printenv|export\s+-p|declare\s+-x|compgen\s+-[ev]|set)\s*(?:$|[;&|)\x60])`),
		r(CategorySecrets, "reads the variable %s", `\$\{?(\w*(?:TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE_KEY|AUTH)\w*|AWS_\w+|GITHUB_\w+|GH_\w+|CODE_EXEC_\w+)`),
		r(CategoryDynamic, "runs %s", `(?:^|[;&|(\s\x60])(eval|source|base64\s+(?:-d|--decode))\b|(?:^|[;&|\s])\.\s+\S`),
		r(CategoryDynamic, "pipes into %s", `\|\s*((?:ba|z|da)?sh|python\d*|node|perl)\b`),
	},
}

// harmlessRedirect matches redirections that write nothing anyone keeps.
var harmlessRedirect = lazyRegexp(`^>>?\s*"?/dev/(null|stdout|stderr)"?$`)

// Assess is the risk check: it returns what it flags in code of language
// (a canonical name: python, javascript or bash), one finding per rule, in
// the order of the code, and what in it does not show as itself (hidden
// and control characters, wide gaps, look-alike names; see Visible). An
// unknown language is checked with the rules that apply to every language
// only.
//
// It is a triage aid for a person who will read the code, not a security
// boundary: obfuscated code can do all of this without matching anything.
func Assess(language, code string) []Finding {
	return assessText(code, &budget{left: inputBudget}, language)
}

// assessText is the risk check of text that runs as any of languages,
// within b. Identical reasons (the same call flagged by two languages)
// count once.
func assessText(s string, b *budget, languages ...string) []Finding {
	var rs []rule
	for _, l := range languages {
		rs = append(rs, rules[l]...)
	}
	rs = append(rs, commonRules...)
	t := splitText(s)
	var out []Finding
	seen := map[string]bool{}
	stopped, refused := 0, b.refused
rules:
	for _, rl := range rs {
		for i := range t.candidates(rl.p) {
			if !b.spend(t.lines[i]) {
				stopped = i + 1
				break rules
			}
			what, ok := firstMatch(rl, t.lines[i])
			if !ok {
				continue
			}
			if len(what) > 60 {
				what = what[:60] + "…"
			}
			f := Finding{
				Category: rl.category,
				Reason:   fmt.Sprintf("%s: %s (line %d)", categoryLabel[rl.category], fmt.Sprintf(rl.what, fmt.Sprintf("%q", what)), i+1),
				Line:     i + 1,
			}
			if !seen[f.Reason] {
				seen[f.Reason] = true
				out = append(out, f)
			}
			break
		}
	}
	out = append(out, destinationFindings(t, b, nil)...)
	if b.refused > refused {
		at := "it stopped before the end"
		if stopped > 0 {
			at = fmt.Sprintf("it stopped at line %d of %d", stopped, len(t.lines))
		}
		out = append(out, Finding{Category: CategoryUnchecked, Line: max(stopped, 1), Reason: fmt.Sprintf("%s: %s, so read all of it yourself", categoryLabel[CategoryUnchecked], at)})
	}
	out = append(out, hiddenFindings(s)...)
	if slices.Contains(languages, "python") {
		out = append(out, encodingFindings(t.lines)...)
	}
	sortFindings(out)
	return out
}

// AllowlistFindings tells the approver which of the destinations code
// names the network allowlist of policy would refuse.
func AllowlistFindings(code string, policy *egress.PolicyInfo) []Finding {
	fs := destinationFindings(splitText(code), &budget{left: inputBudget}, policy)
	if len(fs) < 2 {
		return nil
	}
	// The first lists the destinations, which Assess does already.
	return fs[1:]
}

// firstMatch returns what rl flags in line: its first non-empty group (or the
// whole match), skipping redirections to /dev/null and the like.
func firstMatch(rl rule, line string) (string, bool) {
	if !rl.p.re().MatchString(line) {
		return "", false
	}
	for _, m := range rl.p.re().FindAllStringSubmatch(line, -1) {
		what := strings.TrimSpace(m[0])
		for _, g := range m[1:] {
			if g != "" {
				what = strings.TrimSpace(g)
				break
			}
		}
		if strings.HasPrefix(what, ">") && harmlessRedirect().MatchString(what) {
			continue
		}
		return what, true
	}
	return "", false
}

func sortFindings(f []Finding) {
	slices.SortStableFunc(f, func(a, b Finding) int { return a.Line - b.Line })
}

// Reasons returns the reasons of findings, for people.
func Reasons(findings []Finding) []string {
	out := make([]string, 0, len(findings))
	for _, f := range findings {
		out = append(out, f.Reason)
	}
	return out
}
