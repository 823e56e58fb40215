//go:build windows

package executor

import (
	"errors"
	"fmt"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/windows"
)

// job is the Job Object of one run: every process of the run is in it
// (the program is put there while suspended, before it runs an
// instruction, and its children are born there), none may leave it (no
// JOB_OBJECT_LIMIT_BREAKAWAY_OK), and terminating it ends them all. Its
// handle is the server's alone: when the server dies, the system closes it
// and KILL_ON_JOB_CLOSE ends the run.
type job struct {
	mu      sync.Mutex
	h       windows.Handle // 0 once closed
	stopped bool
}

// killedExitCode is the exit code of the processes of a run that was
// stopped (128 + SIGKILL, as on Unix).
const killedExitCode = 137

// jobLimits are the limits of a run's Job Object.
type jobLimits struct {
	// MemoryBytes caps the memory committed by all the run's processes
	// together (JobMemoryLimit); 0 for none.
	MemoryBytes int64
	// Processes caps the processes alive at once (ActiveProcessLimit);
	// 0 for none.
	Processes int
	// CPUTime caps the user-mode CPU time of all the run's processes
	// together (PerJobUserTimeLimit); 0 for none.
	CPUTime time.Duration
}

// newJob makes the Job Object of a run, with lim and the UI restrictions
// that keep a run away from the desktop (clipboard, other windows' handles,
// global atoms, display and system settings, logging off).
func newJob(lim jobLimits) (*job, error) {
	h, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("creating the run's job object: %w", err)
	}
	j := &job{h: h}
	info := windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION{}
	flags := uint32(windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE | windows.JOB_OBJECT_LIMIT_DIE_ON_UNHANDLED_EXCEPTION)
	if lim.MemoryBytes > 0 {
		flags |= windows.JOB_OBJECT_LIMIT_JOB_MEMORY
		info.JobMemoryLimit = uintptr(lim.MemoryBytes)
	}
	if lim.Processes > 0 {
		flags |= windows.JOB_OBJECT_LIMIT_ACTIVE_PROCESS
		info.BasicLimitInformation.ActiveProcessLimit = uint32(lim.Processes)
	}
	if lim.CPUTime > 0 {
		flags |= windows.JOB_OBJECT_LIMIT_JOB_TIME
		info.BasicLimitInformation.PerJobUserTimeLimit = int64(lim.CPUTime / 100) // in 100 ns units
	}
	info.BasicLimitInformation.LimitFlags = flags
	if _, err := windows.SetInformationJobObject(h, windows.JobObjectExtendedLimitInformation, uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		j.close()
		return nil, fmt.Errorf("setting the limits of the run's job object: %w", err)
	}
	ui := windows.JOBOBJECT_BASIC_UI_RESTRICTIONS{UIRestrictionsClass: windows.JOB_OBJECT_UILIMIT_DESKTOP | windows.JOB_OBJECT_UILIMIT_DISPLAYSETTINGS |
		windows.JOB_OBJECT_UILIMIT_EXITWINDOWS | windows.JOB_OBJECT_UILIMIT_GLOBALATOMS | windows.JOB_OBJECT_UILIMIT_HANDLES |
		windows.JOB_OBJECT_UILIMIT_READCLIPBOARD | windows.JOB_OBJECT_UILIMIT_SYSTEMPARAMETERS | windows.JOB_OBJECT_UILIMIT_WRITECLIPBOARD}
	if _, err := windows.SetInformationJobObject(h, windows.JobObjectBasicUIRestrictions, uintptr(unsafe.Pointer(&ui)), uint32(unsafe.Sizeof(ui))); err != nil {
		j.close()
		return nil, fmt.Errorf("setting the UI restrictions of the run's job object: %w", err)
	}
	return j, nil
}

// adopt puts the suspended process pid in the job, resumes it, and
// terminates the job when it ends (what it leaves running dies with it).
func (j *job) adopt(pid int) error {
	p, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE|windows.SYNCHRONIZE, false, uint32(pid))
	if err != nil {
		return fmt.Errorf("opening the run's process: %w", err)
	}
	if err := windows.AssignProcessToJobObject(j.h, p); err != nil {
		_ = windows.CloseHandle(p)
		return fmt.Errorf("putting the run's process in its job object: %w", err)
	}
	if err := resumeProcess(uint32(pid)); err != nil {
		_ = windows.CloseHandle(p)
		return err
	}
	go func() {
		_, _ = windows.WaitForSingleObject(p, windows.INFINITE)
		_ = windows.CloseHandle(p)
		j.terminate(1)
	}()
	return nil
}

// resumeProcess resumes the threads of the suspended process pid (a
// process created suspended has one).
func resumeProcess(pid uint32) error {
	snap, err := windows.CreateToolhelp32Snapshot(windows.TH32CS_SNAPTHREAD, 0)
	if err != nil {
		return fmt.Errorf("listing the run's threads: %w", err)
	}
	defer windows.CloseHandle(snap)
	resumed := 0
	te := windows.ThreadEntry32{Size: uint32(unsafe.Sizeof(windows.ThreadEntry32{}))}
	for err = windows.Thread32First(snap, &te); err == nil; err = windows.Thread32Next(snap, &te) {
		if te.OwnerProcessID != pid {
			continue
		}
		th, err := windows.OpenThread(windows.THREAD_SUSPEND_RESUME, false, te.ThreadID)
		if err != nil {
			return fmt.Errorf("opening the run's thread: %w", err)
		}
		_, err = windows.ResumeThread(th)
		_ = windows.CloseHandle(th)
		if err != nil {
			return fmt.Errorf("resuming the run's thread: %w", err)
		}
		resumed++
	}
	if resumed == 0 {
		return errors.New("the run's process has no thread to resume")
	}
	return nil
}

// terminate ends every process in the job with exit code code.
func (j *job) terminate(code uint32) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.h != 0 {
		_ = windows.TerminateJobObject(j.h, code)
	}
}

// stop ends the run: every process of the job, which then reports that it
// was killed.
func (j *job) stop() {
	j.mu.Lock()
	j.stopped = true
	j.mu.Unlock()
	j.terminate(killedExitCode)
}

// wasStopped reports whether stop was called.
func (j *job) wasStopped() bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.stopped
}

// close terminates what is left of the job and closes its handle. Safe
// to call twice.
func (j *job) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.h != 0 {
		_ = windows.TerminateJobObject(j.h, 1)
		_ = windows.CloseHandle(j.h)
		j.h = 0
	}
}
