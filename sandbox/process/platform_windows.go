package process

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/codeexec/codeexec/sandbox"
)

// platformProtections are the protections that the run core gives on
// Windows (see executor's job_windows.go), for sandbox_info.
func platformProtections() []sandbox.Protection {
	return []sandbox.Protection{
		{Name: "process group kill", Active: true, Detail: "each run is a Job Object of its own: the program is put in it while suspended, before its first instruction, and the job is terminated when the program ends, when the run is stopped, and by Windows when the server dies (kill on job close)"},
		{Name: "orphan reaping", Active: true, Detail: "every process the program starts is born in the run's Job Object, which none may leave (no breakaway): detached and background processes die with the run"},
		{Name: "resource limits (rlimits)", Active: true, Detail: "the run's Job Object caps the memory committed by all its processes together (the memory limit), the processes alive at once (the process limit) and their CPU time (CPUs × timeout); open files and file sizes are not limited on Windows"},
		{Name: "desktop restrictions", Active: true, Detail: "the Job Object's UI restrictions: no clipboard, no other desktops, no global atoms, no handles of windows outside the job, no display or system settings, no logging off"},
		{Name: "no-new-privileges", Active: false, Detail: "needs Linux: on Windows a run has the server's user's rights"},
		{Name: "no inherited descriptors", Active: true, Detail: "a program gets only its standard handles, whatever the server holds"},
		{Name: "own session keyring", Active: false, Detail: "needs Linux"},
		{Name: "signals", Active: false, Detail: "needs Linux"},
	}
}

// systemRoot is Windows' folder (C:\Windows).
func systemRoot() string {
	if d := os.Getenv("SystemRoot"); filepath.IsAbs(d) {
		return d
	}
	return `C:\Windows`
}

// programPath is the PATH of the programs: the interpreters' folders (and
// Git for Windows' usr\bin, where bash's tools are), then Windows' own.
func programPath(interp map[string]sandbox.Interpreter) string {
	var dirs []string
	for _, name := range slices.Sorted(maps.Keys(interp)) {
		dir := filepath.Dir(interp[name].Path)
		dirs = append(dirs, dir)
		if name == "bash" && strings.EqualFold(filepath.Base(dir), "bin") {
			if tools := filepath.Join(filepath.Dir(dir), "usr", "bin"); isDir(tools) {
				dirs = append(dirs, tools)
			}
		}
	}
	sys := systemRoot()
	dirs = append(dirs, filepath.Join(sys, "System32"), sys)
	return strings.Join(slices.Compact(dirs), string(os.PathListSeparator))
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}

// minimalEnv is the scrubbed environment of a program on Windows: nothing
// of the server's but where Windows is (programs need SystemRoot), PATH
// path, and the home, temporary and application-data folders in the work
// directory; Python in UTF-8 mode (its pipes are otherwise in the ANSI
// code page).
func minimalEnv(workDir, path string) []string {
	sys := systemRoot()
	return []string{
		"PATH=" + path,
		"PATHEXT=.COM;.EXE;.BAT;.CMD",
		"SystemRoot=" + sys,
		"windir=" + sys,
		"SystemDrive=" + filepath.VolumeName(sys),
		"COMSPEC=" + filepath.Join(sys, "System32", "cmd.exe"),
		"HOME=" + workDir,
		"USERPROFILE=" + workDir,
		"APPDATA=" + workDir,
		"LOCALAPPDATA=" + workDir,
		"TEMP=" + workDir,
		"TMP=" + workDir,
		"PYTHONUTF8=1",
		"LANG=C.UTF-8",
	}
}

// programText is the program file's text: a bash program's line endings
// made LF (Git for Windows' bash reads a CR as part of each command).
func programText(lang, code string) string {
	if lang == "bash" {
		return strings.ReplaceAll(code, "\r\n", "\n")
	}
	return code
}
